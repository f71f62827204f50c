-- DropIndex
DROP INDEX "Metric_experimentId_step_key";

-- DropIndex
DROP INDEX "Contribution_experimentId_peerRowId_key";

-- AlterTable
ALTER TABLE "Experiment" ADD COLUMN     "controlVersion" INTEGER NOT NULL DEFAULT 1,
ADD COLUMN     "generation" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "idleSince" TIMESTAMP(3),
ADD COLUMN     "rollbackCheckpointId" TEXT,
ADD COLUMN     "swarmAlivePeers" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "swarmSamplesPerSecond" DOUBLE PRECISION NOT NULL DEFAULT 0,
ADD COLUMN     "swarmSeenAt" TIMESTAMP(3),
ADD COLUMN     "timeline" INTEGER NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "Metric" ADD COLUMN     "generation" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "timeline" INTEGER NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "Checkpoint" ADD COLUMN     "configVersion" INTEGER NOT NULL DEFAULT 1,
ADD COLUMN     "generation" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "timeline" INTEGER NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "Contribution" ADD COLUMN     "session" TEXT NOT NULL DEFAULT '';

-- CreateTable
CREATE TABLE "RunEvent" (
    "id" TEXT NOT NULL,
    "experimentId" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "step" INTEGER NOT NULL,
    "fromStep" INTEGER,
    "timeline" INTEGER NOT NULL,
    "checkpointId" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "RunEvent_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "RunEvent_experimentId_createdAt_idx" ON "RunEvent"("experimentId", "createdAt");

-- CreateIndex
CREATE UNIQUE INDEX "Metric_experimentId_timeline_step_key" ON "Metric"("experimentId", "timeline", "step");

-- CreateIndex
CREATE UNIQUE INDEX "Contribution_experimentId_peerRowId_session_key" ON "Contribution"("experimentId", "peerRowId", "session");

-- AddForeignKey
ALTER TABLE "RunEvent" ADD CONSTRAINT "RunEvent_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment"("id") ON DELETE CASCADE ON UPDATE CASCADE;

