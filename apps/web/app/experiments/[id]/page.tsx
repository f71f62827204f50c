import type { Metadata } from "next";
import Link from "next/link";
import { notFound } from "next/navigation";
import { getAppContext } from "../../../src/server/context.ts";
import { currentUser } from "../../../src/server/queries/current-user.ts";
import { findExperimentView } from "../../../src/server/queries/find-experiment-view.ts";
import { listCheckpoints } from "../../../src/server/services/list-checkpoints.ts";
import { readLeaderboard } from "../../../src/server/services/read-leaderboard.ts";
import { readMembership } from "../../../src/server/services/read-membership.ts";
import { readMetrics } from "../../../src/server/services/read-metrics.ts";
import { readProgramCatalog, TAB_PATH } from "../../../src/server/programs/programs.ts";
import { ConfigSummary } from "../../_components/config-summary.tsx";
import { ContributePanel } from "../../_components/contribute-panel.tsx";
import { ExperimentDashboard } from "../../_components/dashboard/experiment-dashboard.tsx";
import { CHART_POINTS } from "../../_components/dashboard/live-data.ts";
import { formatTime } from "../../_components/format.ts";
import { MembershipBox } from "../../_components/membership-box.tsx";
import { ExperimentStatusBadge } from "../../_components/status-badge.tsx";

type Props = { readonly params: Promise<{ id: string }> };

export async function generateMetadata({ params }: Props): Promise<Metadata> {
  const experiment = await findExperimentView(getAppContext(), (await params).id);
  return { title: experiment?.name ?? "Experiment not found" };
}

export default async function ExperimentPage({ params }: Props) {
  const { id } = await params;
  const ctx = getAppContext();
  const experiment = await findExperimentView(ctx, id);
  if (experiment === null) notFound();
  const [user, metrics, leaderboard, checkpoints] = await Promise.all([
    currentUser(ctx),
    readMetrics(ctx, id, CHART_POINTS),
    readLeaderboard(ctx, id),
    listCheckpoints(ctx, id),
  ]);
  const membership = user === null ? null : (await readMembership(ctx, user, id)).status;
  // A volunteer who may train can do it from this tab, where the platform serves what a tab runs.
  const tab =
    membership === "approved" || membership === "organizer"
      ? await readProgramCatalog(ctx.env.programsDir).then(
          (catalog) => catalog?.tab,
          (error: unknown) => {
            // The operator's problem, in the log; the page goes on without the panel.
            ctx.logger.error({ err: error }, "cannot read the programs manifest");
            return undefined;
          },
        )
      : undefined;

  return (
    <main className="page">
      <div className="page-head">
        <div>
          <h1>{experiment.name}</h1>
          <p className="muted">
            <ExperimentStatusBadge status={experiment.status} /> Organized by{" "}
            <strong>{experiment.organizer}</strong> · id <code>{experiment.id}</code> · since{" "}
            {formatTime(experiment.createdAt)}
          </p>
        </div>
        {membership === "organizer" ? (
          <Link className="button" href={`/experiments/${encodeURIComponent(id)}/manage`}>
            Manage
          </Link>
        ) : null}
      </div>

      <div className="grid-2">
        <div className="stack">
          {experiment.description ? (
            <p className="description">{experiment.description}</p>
          ) : (
            <p className="muted">No description yet.</p>
          )}
        </div>
        <MembershipBox experimentId={id} status={membership} paused={experiment.status === "paused"} />
      </div>

      {tab === undefined || user === null ? null : (
        <ContributePanel
          experimentId={id}
          userId={user.id}
          workerUrl={`${TAB_PATH}/${tab.worker.file}`}
          wasmBase={`${TAB_PATH}/`}
        />
      )}

      <ExperimentDashboard
        experimentId={id}
        metrics={metrics}
        leaderboard={leaderboard}
        checkpoints={checkpoints}
        targetBatchSize={experiment.config.training.targetBatchSize}
        everySteps={experiment.config.checkpoints.everySteps}
        strategy={experiment.config.averaging.strategy}
        run={{ status: experiment.status, swarm: experiment.swarm }}
        renderedAt={ctx.now()}
      />

      <section aria-labelledby="config-heading" className="section">
        <h2 id="config-heading">Training recipe</h2>
        <div className="card">
          <ConfigSummary config={experiment.config} version={experiment.configVersion} />
        </div>
      </section>
    </main>
  );
}
