-- A timeline holds at most one checkpoint of each step.
CREATE UNIQUE INDEX "Checkpoint_experimentId_timeline_step_key" ON "Checkpoint"("experimentId", "timeline", "step");
