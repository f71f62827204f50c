import type { Metadata } from "next";
import Link from "next/link";
import { notFound, redirect } from "next/navigation";
import { getAppContext } from "../../../../src/server/context.ts";
import { currentUser } from "../../../../src/server/queries/current-user.ts";
import { findExperimentView } from "../../../../src/server/queries/find-experiment-view.ts";
import { programLink } from "../../../../src/server/programs/program-links.ts";
import { publicOrigin } from "../../../../src/server/queries/public-origin.ts";
import { listMyNodes } from "../../../../src/server/services/list-my-nodes.ts";
import { listPeerTokens } from "../../../../src/server/services/list-peer-tokens.ts";
import { readMembership } from "../../../../src/server/services/read-membership.ts";
import { AccessDenied } from "../../../_components/access-denied.tsx";
import { NodeList } from "../../../_components/node-list.tsx";
import { TokenPanel } from "../../../_components/token-panel.tsx";

type Props = { readonly params: Promise<{ id: string }> };

export async function generateMetadata({ params }: Props): Promise<Metadata> {
  const experiment = await findExperimentView(getAppContext(), (await params).id);
  return { title: experiment ? `Volunteer for ${experiment.name}` : "Experiment not found" };
}

const refusals = {
  none: "You are not on this experiment’s allowlist yet. Ask to join on the experiment’s page; the organizer approves requests.",
  pending: "Your request to join is waiting for the organizer’s approval. Come back once you are approved.",
  banned: "You are banned from this experiment, so you cannot create tokens for it.",
} as const;

export default async function VolunteerPage({ params }: Props) {
  const { id } = await params;
  const ctx = getAppContext();
  const experiment = await findExperimentView(ctx, id);
  if (experiment === null) notFound();
  const base = `/experiments/${encodeURIComponent(id)}`;
  const user = await currentUser(ctx);
  if (user === null) redirect(`/sign-in?callbackUrl=${encodeURIComponent(`${base}/volunteer`)}`);
  const { status } = await readMembership(ctx, user, id);
  if (status !== "approved" && status !== "organizer") {
    return (
      <AccessDenied
        title="You cannot volunteer for this run yet"
        backHref={base}
        backLabel={`Back to ${experiment.name}`}
      >
        <p>{refusals[status]}</p>
      </AccessDenied>
    );
  }

  const [tokens, nodes, origin] = await Promise.all([
    listPeerTokens(ctx, user, id),
    listMyNodes(ctx, user),
    publicOrigin(ctx),
  ]);
  const myNodes = nodes.filter((node) => node.experimentId === id);
  const inUse = myNodes.filter((node) => node.holdsPlace).length;
  const program = await programLink(ctx, "barnraise-peer", origin);

  return (
    <main className="page">
      <p className="breadcrumbs">
        <Link href={base}>{experiment.name}</Link> / Volunteer
      </p>
      <h1>Lend your computer to {experiment.name}</h1>
      {experiment.status === "paused" ? (
        <p className="notice notice-warn">
          The organizer has paused this run. Your nodes can start now and begin training when it resumes.
        </p>
      ) : null}

      <section aria-labelledby="setup-heading" className="card stack section">
        <h2 id="setup-heading" className="card-title">
          Set up a node
        </h2>
        <ol className="setup-steps">
          <li>Create a token for each machine you want to run (a label helps you tell them apart).</li>
          <li>
            Run the command with your token on that machine. It downloads the Barnraise peer from this
            platform (Node.js 22 or newer is all it needs; the install command gets Node.js too) and picks the
            fastest backend the machine has.
          </li>
          <li>Leave it running. Its status appears below and on your “My nodes” page.</li>
        </ol>
      </section>

      <section aria-labelledby="tokens-heading" className="section">
        <h2 id="tokens-heading">Tokens</h2>
        <div className="card">
          <TokenPanel
            experimentId={id}
            role="trainer"
            origin={origin}
            program={program}
            tokens={tokens.filter((token) => token.role === "trainer")}
          />
        </div>
      </section>

      <section aria-labelledby="nodes-heading" className="section">
        <h2 id="nodes-heading">Your nodes in this experiment</h2>
        <p>
          {inUse === 1 ? "1 machine" : `${inUse} machines`} in use. The organizer allows{" "}
          {experiment.limits.maxNodesPerToken} per token and {experiment.limits.maxNodesPerUser} in all; a
          stopped machine keeps its place until its pass expires, unless you retire it.
        </p>
        {myNodes.length === 0 ? (
          <p className="muted">
            No node has joined with your tokens yet. Run the command above to start one.
          </p>
        ) : (
          <NodeList nodes={myNodes} showExperiment={false} />
        )}
      </section>
    </main>
  );
}
