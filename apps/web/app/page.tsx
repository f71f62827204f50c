import Link from "next/link";
import { getAppContext } from "../src/server/context.ts";
import { currentUser } from "../src/server/queries/current-user.ts";
import { listExperiments } from "../src/server/services/read-experiment.ts";
import { formatCount } from "./_components/format.ts";
import { ExperimentStatusBadge } from "./_components/status-badge.tsx";

const steps = [
  {
    title: "An organizer publishes a training run",
    body: "The run names the model, the dataset and the training recipe. Its configuration is signed, so every volunteer trains exactly what was published.",
  },
  {
    title: "Volunteers lend compute with one command",
    body: "Anyone with a GPU or a spare CPU joins the run from their own machine. Peers find each other and average their progress over a peer-to-peer network.",
  },
  {
    title: "Everyone watches it train",
    body: "The loss curve, the leaderboard of contributors and the checkpoints are public while the run is in progress and after it ends.",
  },
] as const;

const modelNames: Record<string, string> = {
  "mnist-mlp": "MNIST MLP",
  "albert-mlm": "ALBERT masked LM",
  uploaded: "Uploaded TF.js model",
};

export default async function LandingPage() {
  const ctx = getAppContext();
  const [experiments, user] = await Promise.all([listExperiments(ctx), currentUser(ctx)]);

  return (
    <main className="page">
      <header className="hero">
        <h1>Barnraise</h1>
        <p className="tagline">Train deep-learning models together, on hardware that volunteers lend.</p>
        <p>
          Barnraise is a self-hostable platform for collaborative training. Like neighbours raising a barn,
          many people each contribute a little, and a model that no one of them could train alone gets
          trained.
        </p>
      </header>

      <section aria-labelledby="how-it-works">
        <h2 id="how-it-works">How it works</h2>
        <ol className="steps">
          {steps.map((step) => (
            <li key={step.title} className="step">
              <h3>{step.title}</h3>
              <p>{step.body}</p>
            </li>
          ))}
        </ol>
      </section>

      <section aria-labelledby="experiments" className="section">
        <div className="page-head">
          <h2 id="experiments">Experiments</h2>
          {user ? (
            <Link href="/experiments/new" className="button">
              New experiment
            </Link>
          ) : null}
        </div>
        {experiments.length === 0 ? (
          <p className="muted">
            No training runs yet.{" "}
            {user ? (
              <Link href="/experiments/new">Publish the first one.</Link>
            ) : (
              <>
                <Link href="/sign-in">Sign in</Link> to publish the first one.
              </>
            )}
          </p>
        ) : (
          <ul className="experiment-list">
            {experiments.map((experiment) => (
              <li key={experiment.id}>
                <article className="card experiment-card">
                  <h3>
                    <Link href={`/experiments/${encodeURIComponent(experiment.id)}`}>{experiment.name}</Link>
                  </h3>
                  <p>
                    <ExperimentStatusBadge status={experiment.status} />{" "}
                    {modelNames[experiment.modelKind] ?? experiment.modelKind} · by {experiment.organizer}
                  </p>
                  {experiment.description ? <p>{truncate(experiment.description, 160)}</p> : null}
                  <p>
                    {formatCount(experiment.peersOnline)} peer{experiment.peersOnline === 1 ? "" : "s"} online
                  </p>
                </article>
              </li>
            ))}
          </ul>
        )}
      </section>

      <footer className="footer">
        <p>
          Open source under the Apache-2.0 license. Run it on your own server. Service status:{" "}
          <a href="/api/v1/health">
            <code>/api/v1/health</code>
          </a>
          . API: <a href="/api/v1/openapi.json">OpenAPI document</a>.
        </p>
      </footer>
    </main>
  );
}

function truncate(text: string, length: number): string {
  return text.length <= length ? text : `${text.slice(0, length - 1).trimEnd()}…`;
}
