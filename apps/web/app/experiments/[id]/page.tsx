import type { Metadata } from "next";
import Link from "next/link";
import { notFound } from "next/navigation";
import { getAppContext } from "../../../src/server/context.ts";
import { currentUser } from "../../../src/server/queries/current-user.ts";
import { findExperimentView } from "../../../src/server/queries/find-experiment-view.ts";
import { readLatestMetric } from "../../../src/server/queries/latest-metric.ts";
import { listCheckpoints } from "../../../src/server/services/list-checkpoints.ts";
import { readMembership } from "../../../src/server/services/read-membership.ts";
import { ConfigSummary } from "../../_components/config-summary.tsx";
import { formatBytes, formatCount, formatDecimal, formatTime } from "../../_components/format.ts";
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
  const [user, latest, { checkpoints }] = await Promise.all([
    currentUser(ctx),
    readLatestMetric(ctx, id),
    listCheckpoints(ctx, id),
  ]);
  const membership = user === null ? null : (await readMembership(ctx, user, id)).status;

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
          <section aria-labelledby="progress-heading" className="card stack">
            <h2 id="progress-heading" className="card-title">
              Progress
            </h2>
            {latest === null ? (
              <p className="muted">No training steps reported yet. Progress appears once peers train.</p>
            ) : (
              <dl className="facts">
                <div>
                  <dt>Step</dt>
                  <dd>{formatCount(latest.step)}</dd>
                </div>
                <div>
                  <dt>Loss</dt>
                  <dd>{formatDecimal(latest.loss)}</dd>
                </div>
                <div>
                  <dt>Samples/s</dt>
                  <dd>{formatDecimal(latest.samplesPerSecond)}</dd>
                </div>
                <div>
                  <dt>Peers alive</dt>
                  <dd>{formatCount(latest.alivePeers)}</dd>
                </div>
                <div>
                  <dt>Reported</dt>
                  <dd>{formatTime(latest.recordedAt)}</dd>
                </div>
              </dl>
            )}
          </section>
        </div>
        <MembershipBox experimentId={id} status={membership} paused={experiment.status === "paused"} />
      </div>

      <section aria-labelledby="config-heading" className="section">
        <h2 id="config-heading">Training recipe</h2>
        <div className="card">
          <ConfigSummary config={experiment.config} version={experiment.configVersion} />
        </div>
      </section>

      <section aria-labelledby="checkpoints-heading" className="section">
        <h2 id="checkpoints-heading">Checkpoints</h2>
        {checkpoints.length === 0 ? (
          <p className="muted">
            No checkpoints yet. The organizer’s aux peer uploads one every{" "}
            {formatCount(experiment.config.checkpoints.everySteps)} steps.
          </p>
        ) : (
          <div className="table-wrap">
            <table>
              <thead>
                <tr>
                  <th scope="col" className="num">
                    Step
                  </th>
                  <th scope="col" className="num">
                    Loss
                  </th>
                  <th scope="col" className="num">
                    Size
                  </th>
                  <th scope="col">SHA-256</th>
                  <th scope="col">Saved</th>
                  <th scope="col">
                    <span className="visually-hidden">Download</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {checkpoints.map((checkpoint) => (
                  <tr key={checkpoint.id}>
                    <td className="num">{formatCount(checkpoint.step)}</td>
                    <td className="num">{checkpoint.loss === null ? "—" : formatDecimal(checkpoint.loss)}</td>
                    <td className="num">{formatBytes(checkpoint.sizeBytes)}</td>
                    <td className="hash">{checkpoint.sha256}</td>
                    <td>{formatTime(checkpoint.createdAt)}</td>
                    <td>
                      <a href={checkpoint.downloadUrl} download>
                        Download
                        <span className="visually-hidden"> the checkpoint of step {checkpoint.step}</span>
                      </a>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </main>
  );
}
