-- AlterTable
ALTER TABLE "Peer" ADD COLUMN "averaging" BOOLEAN;
