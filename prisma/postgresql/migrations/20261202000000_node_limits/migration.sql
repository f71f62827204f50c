-- AlterTable
ALTER TABLE "Experiment" ADD COLUMN     "maxNodesPerToken" INTEGER NOT NULL DEFAULT 8,
ADD COLUMN     "maxNodesPerUser" INTEGER NOT NULL DEFAULT 32;

-- AlterTable
ALTER TABLE "Peer" ADD COLUMN     "retiredAt" TIMESTAMP(3);
