-- Each step's mean bytes sent per trainer in its averaging round, and the trainers' compute utilization;
-- null for steps from aux programs that do not report them.
ALTER TABLE "Metric" ADD COLUMN     "bytesPerPeer" DOUBLE PRECISION,
ADD COLUMN     "utilization" DOUBLE PRECISION;
