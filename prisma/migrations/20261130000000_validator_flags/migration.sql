-- CreateTable
CREATE TABLE "ValidatorFlag" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "experimentId" TEXT NOT NULL,
    "peerRowId" TEXT NOT NULL,
    "epoch" INTEGER NOT NULL,
    "generation" INTEGER NOT NULL,
    "firstHurtEpoch" INTEGER NOT NULL,
    "baselineLoss" REAL NOT NULL,
    "lossAfter" REAL,
    "medianDelta" REAL NOT NULL,
    "normRatio" REAL NOT NULL,
    "hurtSamples" INTEGER NOT NULL,
    "recentSamples" INTEGER NOT NULL,
    "reports" INTEGER NOT NULL DEFAULT 1,
    "reportedBy" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "reportedAt" DATETIME NOT NULL,
    CONSTRAINT "ValidatorFlag_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "ValidatorFlag_peerRowId_fkey" FOREIGN KEY ("peerRowId") REFERENCES "Peer" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateIndex
CREATE INDEX "ValidatorFlag_peerRowId_idx" ON "ValidatorFlag"("peerRowId");

-- CreateIndex
CREATE UNIQUE INDEX "ValidatorFlag_experimentId_peerRowId_key" ON "ValidatorFlag"("experimentId", "peerRowId");

