import type { Aggregator } from "./aggregator.ts";

/** Σ w_i x_i / Σ w_i, summed in float64 in member order (DeDLOC §3.2): every peer gets the same bits. */
export const weightedMean: Aggregator = {
  aggregate(points, weights) {
    const length = points[0]?.length ?? 0;
    const sum = new Float64Array(length);
    let total = 0;
    points.forEach((values, index) => {
      const weight = weights[index] ?? 0;
      for (let i = 0; i < length; i++) sum[i] = (sum[i] ?? 0) + weight * (values[i] ?? 0);
      total += weight;
    });
    const mean = new Float32Array(length);
    for (let i = 0; i < length; i++) mean[i] = (sum[i] ?? 0) / total;
    return mean;
  },
};
