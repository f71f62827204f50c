-- CreateTable
CREATE TABLE "ValidatorFlag" (
    "id" TEXT NOT NULL,
    "experimentId" TEXT NOT NULL,
    "peerRowId" TEXT NOT NULL,
    "epoch" INTEGER NOT NULL,
    "generation" INTEGER NOT NULL,
    "firstHurtEpoch" INTEGER NOT NULL,
    "baselineLoss" DOUBLE PRECISION NOT NULL,
    "lossAfter" DOUBLE PRECISION,
    "medianDelta" DOUBLE PRECISION NOT NULL,
    "normRatio" DOUBLE PRECISION NOT NULL,
    "hurtSamples" INTEGER NOT NULL,
    "recentSamples" INTEGER NOT NULL,
    "reports" INTEGER NOT NULL DEFAULT 1,
    "reportedBy" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "reportedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "ValidatorFlag_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "ValidatorFlag_peerRowId_idx" ON "ValidatorFlag"("peerRowId");

-- CreateIndex
CREATE UNIQUE INDEX "ValidatorFlag_experimentId_peerRowId_key" ON "ValidatorFlag"("experimentId", "peerRowId");

-- AddForeignKey
ALTER TABLE "ValidatorFlag" ADD CONSTRAINT "ValidatorFlag_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "ValidatorFlag" ADD CONSTRAINT "ValidatorFlag_peerRowId_fkey" FOREIGN KEY ("peerRowId") REFERENCES "Peer"("id") ON DELETE CASCADE ON UPDATE CASCADE;

