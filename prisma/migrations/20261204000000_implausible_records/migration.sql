-- AlterTable
ALTER TABLE "Peer" ADD COLUMN "implausibleAt" DATETIME;
ALTER TABLE "Peer" ADD COLUMN "implausibleReason" TEXT;
ALTER TABLE "Peer" ADD COLUMN "implausibleCount" INTEGER NOT NULL DEFAULT 0;
