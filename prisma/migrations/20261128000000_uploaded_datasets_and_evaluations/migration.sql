-- Image and text dataset imports, and the aux's held-out evaluation of each checkpoint.
-- AlterTable
ALTER TABLE "Checkpoint" ADD COLUMN "evalLoss" REAL;
ALTER TABLE "Checkpoint" ADD COLUMN "evalMetric" TEXT;
ALTER TABLE "Checkpoint" ADD COLUMN "evalSamples" INTEGER;
ALTER TABLE "Checkpoint" ADD COLUMN "evalValue" REAL;
ALTER TABLE "Checkpoint" ADD COLUMN "evaluatedAt" DATETIME;

-- RedefineTables
PRAGMA defer_foreign_keys=ON;
PRAGMA foreign_keys=OFF;
CREATE TABLE "new_DatasetImport" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "name" TEXT NOT NULL,
    "ownerId" TEXT NOT NULL,
    "uploadId" TEXT NOT NULL,
    "fileName" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "labelColumn" TEXT,
    "labelKind" TEXT,
    "imageWidth" INTEGER,
    "imageHeight" INTEGER,
    "imageChannels" INTEGER,
    "vocabSize" INTEGER,
    "status" TEXT NOT NULL DEFAULT 'queued',
    "bytesDone" BIGINT NOT NULL DEFAULT 0,
    "bytesTotal" BIGINT NOT NULL,
    "records" BIGINT NOT NULL DEFAULT 0,
    "error" TEXT,
    "worker" TEXT,
    "heartbeatAt" DATETIME,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL,
    CONSTRAINT "DatasetImport_ownerId_fkey" FOREIGN KEY ("ownerId") REFERENCES "User" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);
INSERT INTO "new_DatasetImport" ("bytesDone", "bytesTotal", "createdAt", "error", "fileName", "heartbeatAt", "id", "kind", "labelColumn", "labelKind", "name", "ownerId", "records", "status", "updatedAt", "uploadId", "worker") SELECT "bytesDone", "bytesTotal", "createdAt", "error", "fileName", "heartbeatAt", "id", "kind", "labelColumn", "labelKind", "name", "ownerId", "records", "status", "updatedAt", "uploadId", "worker" FROM "DatasetImport";
DROP TABLE "DatasetImport";
ALTER TABLE "new_DatasetImport" RENAME TO "DatasetImport";
CREATE INDEX "DatasetImport_ownerId_createdAt_idx" ON "DatasetImport"("ownerId", "createdAt");
CREATE INDEX "DatasetImport_name_status_idx" ON "DatasetImport"("name", "status");
PRAGMA foreign_keys=ON;
PRAGMA defer_foreign_keys=OFF;

