-- Imports of organizers' uploaded files into datasets (apps/web/src/server/datasets/README.md).
-- CreateTable
CREATE TABLE "DatasetImport" (
    "id" TEXT NOT NULL,
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
    "heartbeatAt" TIMESTAMP(3),
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "DatasetImport_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "DatasetImport_ownerId_createdAt_idx" ON "DatasetImport"("ownerId", "createdAt");

-- CreateIndex
CREATE INDEX "DatasetImport_name_status_idx" ON "DatasetImport"("name", "status");

-- AddForeignKey
ALTER TABLE "DatasetImport" ADD CONSTRAINT "DatasetImport_ownerId_fkey" FOREIGN KEY ("ownerId") REFERENCES "User"("id") ON DELETE CASCADE ON UPDATE CASCADE;

