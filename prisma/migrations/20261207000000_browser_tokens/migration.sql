-- Tokens issued to a signed-in volunteer's browser tab for its key, whose secret is never shown.
ALTER TABLE "PeerToken" ADD COLUMN "browser" BOOLEAN NOT NULL DEFAULT false;
