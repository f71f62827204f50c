import { at } from "./at.ts";
import { seededRandom } from "./seeded-random.ts";

/** One peer's samples of y = w·x + noise. */
export interface RegressionDataset {
  readonly inputs: Float64Array[];
  readonly targets: number[];
}

/** `samples` samples of y = trueWeights·x + uniform noise in ±0.3, x uniform in ±1, from `seed`. */
export function regressionDataset(
  seed: number,
  samples: number,
  trueWeights: Float64Array,
): RegressionDataset {
  const random = seededRandom(seed);
  const inputs: Float64Array[] = [];
  const targets: number[] = [];
  for (let n = 0; n < samples; n++) {
    const x = Float64Array.from({ length: trueWeights.length }, () => random() * 2 - 1);
    let y = (random() * 2 - 1) * 0.3;
    for (let i = 0; i < trueWeights.length; i++) y += at(trueWeights, i) * at(x, i);
    inputs.push(x);
    targets.push(y);
  }
  return { inputs, targets };
}

/** The mean squared error of `weights` on `data`, and its gradient. */
export function lossAndGradient(
  weights: Float32Array,
  data: RegressionDataset,
): { loss: number; gradient: Float32Array } {
  const samples = data.inputs.length;
  const gradient = new Float64Array(weights.length);
  let loss = 0;
  data.inputs.forEach((x, n) => {
    let error = -at(data.targets, n);
    for (let i = 0; i < weights.length; i++) error += at(weights, i) * at(x, i);
    loss += error * error;
    for (let i = 0; i < weights.length; i++) gradient[i] = at(gradient, i) + (2 * error * at(x, i)) / samples;
  });
  return { loss: loss / samples, gradient: Float32Array.from(gradient) };
}
