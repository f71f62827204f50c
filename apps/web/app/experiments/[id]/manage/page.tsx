import type { Metadata } from "next";
import Link from "next/link";
import { NodeLimitsForm } from "../../../_components/node-limits-form.tsx";
import { notFound, redirect } from "next/navigation";
import { getAppContext } from "../../../../src/server/context.ts";
import { currentUser } from "../../../../src/server/queries/current-user.ts";
import { findExperimentView } from "../../../../src/server/queries/find-experiment-view.ts";
import { programLink } from "../../../../src/server/programs/program-links.ts";
import { publicOrigin } from "../../../../src/server/queries/public-origin.ts";
import { findExperiment } from "../../../../src/server/services/experiment-access.ts";
import { listAllowlist } from "../../../../src/server/services/list-allowlist.ts";
import { listCheckpoints } from "../../../../src/server/services/list-checkpoints.ts";
import {
  FLAG_AFTER_REFUSALS,
  listImplausibleNodes,
} from "../../../../src/server/services/list-implausible-nodes.ts";
import { listDiscardedMetricPoints } from "../../../../src/server/services/list-discarded-metric-points.ts";
import { listPeerTokens } from "../../../../src/server/services/list-peer-tokens.ts";
import { listValidatorFlags } from "../../../../src/server/services/list-validator-flags.ts";
import { readAlertSettings } from "../../../../src/server/services/read-alert-settings.ts";
import { AccessDenied } from "../../../_components/access-denied.tsx";
import { AlertSettings } from "../../../_components/alert-settings.tsx";
import { AllowlistManager } from "../../../_components/allowlist-manager.tsx";
import { CheckpointRollback } from "../../../_components/checkpoint-rollback.tsx";
import { CopyBox } from "../../../_components/copy-box.tsx";
import { ExperimentForm } from "../../../_components/experiment-form.tsx";
import { ImplausibleNodes } from "../../../_components/implausible-nodes.tsx";
import { LossCurvePoints } from "../../../_components/loss-curve-points.tsx";
import { PauseResume, RotateAuthorityKey } from "../../../_components/run-controls.tsx";
import { ExperimentStatusBadge } from "../../../_components/status-badge.tsx";
import { TokenPanel } from "../../../_components/token-panel.tsx";
import { ValidatorFlags } from "../../../_components/validator-flags.tsx";

type Props = { readonly params: Promise<{ id: string }> };

export async function generateMetadata({ params }: Props): Promise<Metadata> {
  const experiment = await findExperimentView(getAppContext(), (await params).id);
  return { title: experiment ? `Manage ${experiment.name}` : "Experiment not found" };
}

export default async function ManageExperimentPage({ params }: Props) {
  const { id } = await params;
  const ctx = getAppContext();
  const experiment = await findExperimentView(ctx, id);
  if (experiment === null) notFound();
  const base = `/experiments/${encodeURIComponent(id)}`;
  const user = await currentUser(ctx);
  if (user === null) redirect(`/sign-in?callbackUrl=${encodeURIComponent(`${base}/manage`)}`);
  if (experiment.organizer !== user.username) {
    return (
      <AccessDenied
        title="Only the organizer can manage this experiment"
        backHref={base}
        backLabel={`Back to ${experiment.name}`}
      >
        <p>
          You are signed in as <strong>{user.username}</strong>; <strong>{experiment.organizer}</strong>{" "}
          organizes this experiment.
        </p>
      </AccessDenied>
    );
  }

  const [entries, tokens, origin, { checkpoints }, record, alerts, flags, implausible, discarded] =
    await Promise.all([
      listAllowlist(ctx, user, id),
      listPeerTokens(ctx, user, id),
      publicOrigin(ctx),
      listCheckpoints(ctx, id),
      // The rollback state is not part of the public view.
      findExperiment(ctx, id),
      readAlertSettings(ctx, user, id),
      listValidatorFlags(ctx, user, id),
      listImplausibleNodes(ctx, user, id),
      listDiscardedMetricPoints(ctx, user, id),
    ]);
  const pending = entries.filter((entry) => entry.status === "pending").length;
  const program = await programLink(ctx, "barnraise-aux", origin);

  return (
    <main className="page">
      <p className="breadcrumbs">
        <Link href={base}>{experiment.name}</Link> / Manage
      </p>
      <div className="page-head">
        <div>
          <h1>Manage {experiment.name}</h1>
          <p className="muted">
            <ExperimentStatusBadge status={experiment.status} /> id <code>{experiment.id}</code> · config
            version {experiment.configVersion}
            {pending > 0 ? ` · ${pending} request${pending === 1 ? "" : "s"} to join waiting` : ""}
          </p>
        </div>
        <Link className="button button-quiet" href={base}>
          View public page
        </Link>
      </div>

      <div className="grid-2">
        <section aria-labelledby="run-heading" className="card stack">
          <h2 id="run-heading" className="card-title">
            Run
          </h2>
          <PauseResume experimentId={id} status={experiment.status} />
        </section>

        <section aria-labelledby="join-heading" className="card stack">
          <h2 id="join-heading" className="card-title">
            How volunteers join
          </h2>
          <p>
            Approve volunteers below. Each then creates a token on the experiment’s volunteer page and runs:
          </p>
          <CopyBox text={`barnraise-peer --server ${origin} --token <TOKEN>`} label="the volunteer command" />
          <p className="muted">
            Share this link with them: <Link href={base}>{`${origin}${base}`}</Link>
          </p>
          <NodeLimitsForm experimentId={id} limits={experiment.limits} />
        </section>
      </div>

      <section aria-labelledby="validator-heading" className="section">
        <h2 id="validator-heading">
          Flagged by the validator{" "}
          {flags.length > 0 ? <span className="badge badge-warn">{flags.length}</span> : null}
        </h2>
        <div className="card">
          <ValidatorFlags
            experimentId={id}
            flags={flags}
            checkpoints={checkpoints}
            generation={record.generation}
          />
        </div>
      </section>

      <section aria-labelledby="implausible-heading" className="section">
        <h2 id="implausible-heading">
          Refused progress records{" "}
          {implausible.length > 0 ? <span className="badge badge-warn">{implausible.length}</span> : null}
        </h2>
        <div className="card">
          <ImplausibleNodes experimentId={id} nodes={implausible} flagAfter={FLAG_AFTER_REFUSALS} />
        </div>
      </section>

      <section aria-labelledby="rollback-heading" className="section">
        <h2 id="rollback-heading">Checkpoints and rollback</h2>
        <div className="card">
          <CheckpointRollback
            experimentId={id}
            checkpoints={checkpoints}
            generation={record.generation}
            rollbackCheckpointId={record.rollbackCheckpointId}
          />
        </div>
      </section>

      <section aria-labelledby="loss-points-heading" className="section">
        <h2 id="loss-points-heading">Loss curve points</h2>
        <div className="card">
          <LossCurvePoints experimentId={id} timeline={record.timeline} discarded={discarded} />
        </div>
      </section>

      <section aria-labelledby="allowlist-heading" className="section">
        <h2 id="allowlist-heading">Allowlist</h2>
        <div className="card">
          <AllowlistManager experimentId={id} entries={entries} />
        </div>
      </section>

      <section aria-labelledby="aux-heading" className="section">
        <h2 id="aux-heading">Aux peers</h2>
        <div className="card stack">
          <p>
            Start one or more aux peers on machines with a stable address; a cheap CPU server is enough. They
            bootstrap the swarm, relay for volunteers behind NAT, report progress here, upload checkpoints and
            help average.
          </p>
          <TokenPanel
            experimentId={id}
            role="aux"
            origin={origin}
            program={program}
            tokens={tokens.filter((token) => token.role === "aux")}
          />
        </div>
      </section>

      <section aria-labelledby="alerts-heading" className="section">
        <h2 id="alerts-heading">Alerts</h2>
        <p className="muted">
          Hear when the run stalls, a node drops, the aux goes silent, a checkpoint is uploaded or a volunteer
          asks to join.
        </p>
        <AlertSettings experimentId={id} settings={alerts} />
      </section>

      <section aria-labelledby="settings-heading" className="section">
        <h2 id="settings-heading">Settings</h2>
        <ExperimentForm
          mode="edit"
          experiment={{
            id: experiment.id,
            name: experiment.name,
            description: experiment.description,
            configVersion: experiment.configVersion,
          }}
          initialConfig={experiment.config}
        />
      </section>

      <section aria-labelledby="key-heading" className="section">
        <h2 id="key-heading">Authority key</h2>
        <div className="card">
          <RotateAuthorityKey
            experimentId={id}
            publicKey={experiment.authorityPublicKey}
            keyVersion={experiment.authorityKeyVersion}
          />
        </div>
      </section>
    </main>
  );
}
