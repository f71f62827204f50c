-- CreateTable
CREATE TABLE "RunEvent" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "experimentId" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "step" INTEGER NOT NULL,
    "fromStep" INTEGER,
    "timeline" INTEGER NOT NULL,
    "checkpointId" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "RunEvent_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- RedefineTables
PRAGMA defer_foreign_keys=ON;
PRAGMA foreign_keys=OFF;
CREATE TABLE "new_Experiment" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "name" TEXT NOT NULL,
    "description" TEXT NOT NULL DEFAULT '',
    "organizerId" TEXT NOT NULL,
    "config" TEXT NOT NULL,
    "configVersion" INTEGER NOT NULL DEFAULT 1,
    "status" TEXT NOT NULL DEFAULT 'running',
    "authorityPublicKey" TEXT NOT NULL,
    "authoritySecretKey" TEXT NOT NULL,
    "authorityKeyVersion" INTEGER NOT NULL DEFAULT 1,
    "controlVersion" INTEGER NOT NULL DEFAULT 1,
    "generation" INTEGER NOT NULL DEFAULT 0,
    "rollbackCheckpointId" TEXT,
    "timeline" INTEGER NOT NULL DEFAULT 0,
    "swarmAlivePeers" INTEGER NOT NULL DEFAULT 0,
    "swarmSamplesPerSecond" REAL NOT NULL DEFAULT 0,
    "swarmSeenAt" DATETIME,
    "idleSince" DATETIME,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL,
    CONSTRAINT "Experiment_organizerId_fkey" FOREIGN KEY ("organizerId") REFERENCES "User" ("id") ON DELETE RESTRICT ON UPDATE CASCADE
);
INSERT INTO "new_Experiment" ("authorityKeyVersion", "authorityPublicKey", "authoritySecretKey", "config", "configVersion", "createdAt", "description", "id", "name", "organizerId", "status", "updatedAt") SELECT "authorityKeyVersion", "authorityPublicKey", "authoritySecretKey", "config", "configVersion", "createdAt", "description", "id", "name", "organizerId", "status", "updatedAt" FROM "Experiment";
DROP TABLE "Experiment";
ALTER TABLE "new_Experiment" RENAME TO "Experiment";
CREATE INDEX "Experiment_organizerId_idx" ON "Experiment"("organizerId");
CREATE TABLE "new_Metric" (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "experimentId" TEXT NOT NULL,
    "timeline" INTEGER NOT NULL DEFAULT 0,
    "step" INTEGER NOT NULL,
    "generation" INTEGER NOT NULL DEFAULT 0,
    "loss" REAL NOT NULL,
    "samplesPerSecond" REAL NOT NULL,
    "alivePeers" INTEGER NOT NULL,
    "recordedAt" DATETIME NOT NULL,
    CONSTRAINT "Metric_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);
INSERT INTO "new_Metric" ("alivePeers", "experimentId", "id", "loss", "recordedAt", "samplesPerSecond", "step") SELECT "alivePeers", "experimentId", "id", "loss", "recordedAt", "samplesPerSecond", "step" FROM "Metric";
DROP TABLE "Metric";
ALTER TABLE "new_Metric" RENAME TO "Metric";
CREATE UNIQUE INDEX "Metric_experimentId_timeline_step_key" ON "Metric"("experimentId", "timeline", "step");
CREATE TABLE "new_Checkpoint" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "experimentId" TEXT NOT NULL,
    "step" INTEGER NOT NULL,
    "loss" REAL,
    "sizeBytes" BIGINT NOT NULL,
    "sha256" TEXT NOT NULL,
    "storageKey" TEXT NOT NULL,
    "uploadedBy" TEXT NOT NULL,
    "timeline" INTEGER NOT NULL DEFAULT 0,
    "generation" INTEGER NOT NULL DEFAULT 0,
    "configVersion" INTEGER NOT NULL DEFAULT 1,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "Checkpoint_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);
INSERT INTO "new_Checkpoint" ("createdAt", "experimentId", "id", "loss", "sha256", "sizeBytes", "step", "storageKey", "uploadedBy") SELECT "createdAt", "experimentId", "id", "loss", "sha256", "sizeBytes", "step", "storageKey", "uploadedBy" FROM "Checkpoint";
DROP TABLE "Checkpoint";
ALTER TABLE "new_Checkpoint" RENAME TO "Checkpoint";
CREATE UNIQUE INDEX "Checkpoint_storageKey_key" ON "Checkpoint"("storageKey");
CREATE INDEX "Checkpoint_experimentId_step_idx" ON "Checkpoint"("experimentId", "step");
CREATE TABLE "new_Contribution" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "experimentId" TEXT NOT NULL,
    "userId" TEXT NOT NULL,
    "peerRowId" TEXT NOT NULL,
    "session" TEXT NOT NULL DEFAULT '',
    "samples" BIGINT NOT NULL DEFAULT 0,
    "computeSeconds" REAL NOT NULL DEFAULT 0,
    "bytesAggregated" BIGINT NOT NULL DEFAULT 0,
    "longestSessionSeconds" REAL NOT NULL DEFAULT 0,
    "updatedAt" DATETIME NOT NULL,
    CONSTRAINT "Contribution_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "Contribution_userId_fkey" FOREIGN KEY ("userId") REFERENCES "User" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "Contribution_peerRowId_fkey" FOREIGN KEY ("peerRowId") REFERENCES "Peer" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);
INSERT INTO "new_Contribution" ("bytesAggregated", "computeSeconds", "experimentId", "id", "longestSessionSeconds", "peerRowId", "samples", "updatedAt", "userId") SELECT "bytesAggregated", "computeSeconds", "experimentId", "id", "longestSessionSeconds", "peerRowId", "samples", "updatedAt", "userId" FROM "Contribution";
DROP TABLE "Contribution";
ALTER TABLE "new_Contribution" RENAME TO "Contribution";
CREATE INDEX "Contribution_experimentId_userId_idx" ON "Contribution"("experimentId", "userId");
CREATE UNIQUE INDEX "Contribution_experimentId_peerRowId_session_key" ON "Contribution"("experimentId", "peerRowId", "session");
PRAGMA foreign_keys=ON;
PRAGMA defer_foreign_keys=OFF;

-- CreateIndex
CREATE INDEX "RunEvent_experimentId_createdAt_idx" ON "RunEvent"("experimentId", "createdAt");

