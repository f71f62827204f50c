-- Image and text dataset imports, and the aux's held-out evaluation of each checkpoint.
-- AlterTable
ALTER TABLE "Checkpoint" ADD COLUMN     "evalLoss" DOUBLE PRECISION,
ADD COLUMN     "evalMetric" TEXT,
ADD COLUMN     "evalSamples" INTEGER,
ADD COLUMN     "evalValue" DOUBLE PRECISION,
ADD COLUMN     "evaluatedAt" TIMESTAMP(3);

-- AlterTable
ALTER TABLE "DatasetImport" ADD COLUMN     "imageChannels" INTEGER,
ADD COLUMN     "imageHeight" INTEGER,
ADD COLUMN     "imageWidth" INTEGER,
ADD COLUMN     "vocabSize" INTEGER,
ALTER COLUMN "labelKind" DROP NOT NULL;

