import { newRunConfig } from "@barnraise/protocol";
import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { getAppContext } from "../../../src/server/context.ts";
import { currentUser } from "../../../src/server/queries/current-user.ts";
import { ExperimentForm } from "../../_components/experiment-form.tsx";

export const metadata: Metadata = { title: "New experiment" };

export default async function NewExperimentPage() {
  const user = await currentUser(getAppContext());
  if (user === null) redirect(`/sign-in?callbackUrl=${encodeURIComponent("/experiments/new")}`);

  return (
    <main className="page">
      <div className="page-head">
        <div>
          <h1>New experiment</h1>
          <p className="muted">
            Publish a training run. Every setting has a sensible default; you can change them later, and
            volunteers’ peers pick up the new configuration.
          </p>
        </div>
      </div>
      <ExperimentForm mode="create" initialConfig={newRunConfig()} />
    </main>
  );
}
