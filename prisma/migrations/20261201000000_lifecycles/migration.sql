-- AlterTable
ALTER TABLE "Experiment" ADD COLUMN "split" TEXT;
ALTER TABLE "Experiment" ADD COLUMN "splitAlertedAt" DATETIME;
ALTER TABLE "Experiment" ADD COLUMN "splitSince" DATETIME;

-- AlterTable
ALTER TABLE "PeerToken" ADD COLUMN "passesExpireAt" DATETIME;

-- AlterTable
ALTER TABLE "Peer" ADD COLUMN "swarmRefusal" TEXT;
ALTER TABLE "Peer" ADD COLUMN "swarmRefusalCode" TEXT;
ALTER TABLE "Peer" ADD COLUMN "swarmRefusedAt" DATETIME;
ALTER TABLE "Peer" ADD COLUMN "swarmSeenAt" DATETIME;

-- CreateTable
CREATE TABLE "AuthorityRotation" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "experimentId" TEXT NOT NULL,
    "keyVersion" INTEGER NOT NULL,
    "publicKey" TEXT NOT NULL,
    "previousPublicKey" TEXT NOT NULL,
    "certificate" TEXT NOT NULL,
    "rotatedAt" DATETIME NOT NULL,
    CONSTRAINT "AuthorityRotation_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateIndex
CREATE UNIQUE INDEX "AuthorityRotation_experimentId_keyVersion_key" ON "AuthorityRotation"("experimentId", "keyVersion");

-- CreateIndex
CREATE INDEX "Peer_experimentId_peerId_idx" ON "Peer"("experimentId", "peerId");

