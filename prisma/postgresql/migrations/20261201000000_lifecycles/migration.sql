-- AlterTable
ALTER TABLE "Experiment" ADD COLUMN     "split" TEXT,
ADD COLUMN     "splitAlertedAt" TIMESTAMP(3),
ADD COLUMN     "splitSince" TIMESTAMP(3);

-- AlterTable
ALTER TABLE "PeerToken" ADD COLUMN     "passesExpireAt" TIMESTAMP(3);

-- AlterTable
ALTER TABLE "Peer" ADD COLUMN     "swarmRefusal" TEXT,
ADD COLUMN     "swarmRefusalCode" TEXT,
ADD COLUMN     "swarmRefusedAt" TIMESTAMP(3),
ADD COLUMN     "swarmSeenAt" TIMESTAMP(3);

-- CreateTable
CREATE TABLE "AuthorityRotation" (
    "id" TEXT NOT NULL,
    "experimentId" TEXT NOT NULL,
    "keyVersion" INTEGER NOT NULL,
    "publicKey" TEXT NOT NULL,
    "previousPublicKey" TEXT NOT NULL,
    "certificate" TEXT NOT NULL,
    "rotatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "AuthorityRotation_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "AuthorityRotation_experimentId_keyVersion_key" ON "AuthorityRotation"("experimentId", "keyVersion");

-- CreateIndex
CREATE INDEX "Peer_experimentId_peerId_idx" ON "Peer"("experimentId", "peerId");

-- AddForeignKey
ALTER TABLE "AuthorityRotation" ADD CONSTRAINT "AuthorityRotation_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment"("id") ON DELETE CASCADE ON UPDATE CASCADE;

