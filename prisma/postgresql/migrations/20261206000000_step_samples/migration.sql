-- The samples of each step as the aux accepted them in its averaging round, null for steps whose round the
-- aux did not reduce a part of, and for steps from aux programs that do not report them.
ALTER TABLE "Metric" ADD COLUMN     "samples" DOUBLE PRECISION;
