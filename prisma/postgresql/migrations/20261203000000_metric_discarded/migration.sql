-- AlterTable
ALTER TABLE "Metric" ADD COLUMN     "discardedAt" TIMESTAMP(3),
ADD COLUMN     "discardedBy" TEXT;
