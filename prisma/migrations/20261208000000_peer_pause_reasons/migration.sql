-- Why a volunteer's rules hold a trainer (machine in use, on battery, ...), as an aux reported it.
ALTER TABLE "Peer" ADD COLUMN "pauseReasons" TEXT;
