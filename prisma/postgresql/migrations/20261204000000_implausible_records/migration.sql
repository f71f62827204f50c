-- AlterTable
ALTER TABLE "Peer" ADD COLUMN     "implausibleAt" TIMESTAMP(3),
ADD COLUMN     "implausibleReason" TEXT,
ADD COLUMN     "implausibleCount" INTEGER NOT NULL DEFAULT 0;
