-- Alerts: webhooks and e-mail per experiment, the delivery outbox and its attempts, the monitor's state, and volunteers' node e-mails.
-- AlterTable
ALTER TABLE "User" ADD COLUMN "nodeAlertsEmail" TEXT;

-- AlterTable
ALTER TABLE "Peer" ADD COLUMN "alertCounted" BOOLEAN;

-- CreateTable
CREATE TABLE "AlertSettings" (
    "experimentId" TEXT NOT NULL PRIMARY KEY,
    "emailRecipients" TEXT NOT NULL DEFAULT '[]',
    "emailEvents" TEXT NOT NULL DEFAULT '[]',
    "stalledAfterMinutes" INTEGER NOT NULL DEFAULT 10,
    "auxSilentAfterMinutes" INTEGER NOT NULL DEFAULT 5,
    "aliveSince" DATETIME,
    "lastMetricId" INTEGER,
    "progressAt" DATETIME,
    "stalledAlertedFor" DATETIME,
    "auxSilentAlertedFor" DATETIME,
    "updatedAt" DATETIME NOT NULL,
    CONSTRAINT "AlertSettings_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "AlertWebhook" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "experimentId" TEXT NOT NULL,
    "url" TEXT NOT NULL,
    "sealedSecret" TEXT NOT NULL,
    "events" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "AlertWebhook_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "AlertDelivery" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "experimentId" TEXT NOT NULL,
    "eventId" TEXT NOT NULL,
    "event" TEXT NOT NULL,
    "payload" TEXT NOT NULL,
    "channel" TEXT NOT NULL,
    "webhookId" TEXT,
    "target" TEXT NOT NULL,
    "subscriberId" TEXT,
    "status" TEXT NOT NULL DEFAULT 'pending',
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "nextAttemptAt" DATETIME NOT NULL,
    "leaseOwner" TEXT,
    "leaseUntil" DATETIME,
    "lastResult" TEXT,
    "deliveredAt" DATETIME,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "AlertDelivery_experimentId_fkey" FOREIGN KEY ("experimentId") REFERENCES "Experiment" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "AlertDelivery_webhookId_fkey" FOREIGN KEY ("webhookId") REFERENCES "AlertWebhook" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "AlertDelivery_subscriberId_fkey" FOREIGN KEY ("subscriberId") REFERENCES "User" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "AlertAttempt" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "deliveryId" TEXT NOT NULL,
    "number" INTEGER NOT NULL,
    "ok" BOOLEAN NOT NULL,
    "statusCode" INTEGER,
    "result" TEXT NOT NULL,
    "durationMs" INTEGER NOT NULL,
    "startedAt" DATETIME NOT NULL,
    CONSTRAINT "AlertAttempt_deliveryId_fkey" FOREIGN KEY ("deliveryId") REFERENCES "AlertDelivery" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateIndex
CREATE INDEX "AlertWebhook_experimentId_idx" ON "AlertWebhook"("experimentId");

-- CreateIndex
CREATE INDEX "AlertDelivery_status_nextAttemptAt_idx" ON "AlertDelivery"("status", "nextAttemptAt");

-- CreateIndex
CREATE INDEX "AlertDelivery_experimentId_createdAt_idx" ON "AlertDelivery"("experimentId", "createdAt");

-- CreateIndex
CREATE UNIQUE INDEX "AlertAttempt_deliveryId_number_key" ON "AlertAttempt"("deliveryId", "number");

-- CreateIndex
CREATE INDEX "Peer_alertCounted_idx" ON "Peer"("alertCounted");

