-- Imports of organizers' uploaded files into datasets (apps/web/src/server/datasets/README.md).
-- CreateTable
CREATE TABLE "DatasetImport" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "name" TEXT NOT NULL,
    "ownerId" TEXT NOT NULL,
    "uploadId" TEXT NOT NULL,
    "fileName" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "labelColumn" TEXT,
    "labelKind" TEXT NOT NULL,
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

-- CreateIndex
CREATE INDEX "DatasetImport_ownerId_createdAt_idx" ON "DatasetImport"("ownerId", "createdAt");

-- CreateIndex
CREATE INDEX "DatasetImport_name_status_idx" ON "DatasetImport"("name", "status");

