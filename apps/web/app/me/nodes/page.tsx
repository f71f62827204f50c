import type { Metadata } from "next";
import Link from "next/link";
import { redirect } from "next/navigation";
import { getAppContext } from "../../../src/server/context.ts";
import { currentUser } from "../../../src/server/queries/current-user.ts";
import { listMyNodes } from "../../../src/server/services/list-my-nodes.ts";
import { readNodeAlerts } from "../../../src/server/services/node-alerts.ts";
import { NodeAlertsForm } from "../../_components/node-alerts-form.tsx";
import { NodeList } from "../../_components/node-list.tsx";

export const metadata: Metadata = { title: "My nodes" };

export default async function MyNodesPage() {
  const ctx = getAppContext();
  const user = await currentUser(ctx);
  if (user === null) redirect(`/sign-in?callbackUrl=${encodeURIComponent("/me/nodes")}`);
  const [nodes, alerts, account] = await Promise.all([
    listMyNodes(ctx, user),
    readNodeAlerts(ctx, user),
    ctx.db.user.findUnique({ where: { id: user.id }, select: { email: true } }),
  ]);
  const counted = nodes.filter((node) => node.counted).length;

  return (
    <main className="page">
      <h1>My nodes</h1>
      <p className="muted">
        Every machine that joined an experiment with one of your tokens, and whether its work counts right
        now.
      </p>
      {nodes.length === 0 ? (
        <p className="notice notice-info">
          None of your machines has joined an experiment yet. Pick one on the{" "}
          <Link href="/#experiments">experiments list</Link>, ask to join, and run the command from its
          volunteer page.
        </p>
      ) : (
        <>
          <p role="status">
            {counted} of {nodes.length} node{nodes.length === 1 ? "" : "s"} counted.
          </p>
          <NodeList nodes={nodes} showExperiment />
        </>
      )}
      <section aria-labelledby="node-alerts-heading" className="section">
        <h2 id="node-alerts-heading">E-mail alerts</h2>
        <NodeAlertsForm settings={alerts} suggestedEmail={account?.email ?? null} />
      </section>
    </main>
  );
}
