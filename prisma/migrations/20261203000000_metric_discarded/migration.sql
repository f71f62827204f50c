-- AlterTable
ALTER TABLE "Metric" ADD COLUMN "discardedAt" DATETIME;
ALTER TABLE "Metric" ADD COLUMN "discardedBy" TEXT;
