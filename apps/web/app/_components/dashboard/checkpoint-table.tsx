import type { CheckpointView } from "../../../src/api/schemas/public.ts";
import { formatBytes, formatCount, formatDecimal, formatTime } from "../format.ts";

/** The saved checkpoints, newest first, each with its full SHA-256 and a download link. */
export function CheckpointTable({
  checkpoints,
  everySteps,
}: {
  readonly checkpoints: readonly CheckpointView[];
  readonly everySteps: number;
}) {
  return (
    <section aria-labelledby="checkpoints-heading" className="section">
      <h2 id="checkpoints-heading">Checkpoints</h2>
      {checkpoints.length === 0 ? (
        <p className="muted">
          No checkpoints yet. The organizer’s aux peer uploads one every {formatCount(everySteps)} steps.
        </p>
      ) : (
        <div className="table-wrap dashboard-table-wrap">
          <table data-testid="checkpoints" className="dashboard-table">
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
                <tr
                  key={checkpoint.id}
                  data-testid="checkpoint-row"
                  data-sha256={checkpoint.sha256}
                  data-step={checkpoint.step}
                >
                  <td className="num">{formatCount(checkpoint.step)}</td>
                  <td className="num">{checkpoint.loss === null ? "—" : formatDecimal(checkpoint.loss)}</td>
                  <td className="num">{formatBytes(checkpoint.sizeBytes)}</td>
                  <td>
                    {/* Shortened on screen; the whole hash stays in the text, selectable, and shows on focus. */}
                    <code className="dashboard-sha" title={checkpoint.sha256} tabIndex={0}>
                      {checkpoint.sha256}
                    </code>
                  </td>
                  <td>
                    <time dateTime={checkpoint.createdAt}>{formatTime(checkpoint.createdAt)}</time>
                  </td>
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
  );
}
