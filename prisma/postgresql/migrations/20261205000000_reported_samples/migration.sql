-- AlterTable
ALTER TABLE "Contribution" ADD COLUMN     "reportedSamples" BIGINT NOT NULL DEFAULT 0;

-- Existing credit was reported as it stands.
UPDATE "Contribution" SET "reportedSamples" = "samples";
