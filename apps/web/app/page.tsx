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

export default function LandingPage() {
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

      <footer className="footer">
        <p>
          Open source under the Apache-2.0 license. Run it on your own server. Service status:{" "}
          <a href="/api/v1/health">
            <code>/api/v1/health</code>
          </a>
        </p>
      </footer>
    </main>
  );
}
