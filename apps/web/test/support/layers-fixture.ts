import * as tf from "@tensorflow/tfjs";

/** A model as `tf.LayersModel.save()` writes it: model.json and its weight shards, by file name. */
export interface SavedLayersModel {
  readonly files: { name: string; bytes: Uint8Array }[];
}

/**
 * Saves a real TF.js Sequential model (inputs → hidden relu → classes softmax) the way the browser
 * download handler does: `model.json` whose manifest names `weights.bin`.
 */
export async function savedLayersModel(options: {
  inputs: number;
  hidden: number;
  classes: number;
}): Promise<SavedLayersModel> {
  await tf.setBackend("cpu");
  const model = tf.sequential();
  model.add(tf.layers.dense({ inputShape: [options.inputs], units: options.hidden, activation: "relu" }));
  model.add(tf.layers.dense({ units: options.classes, activation: "softmax" }));
  let files: { name: string; bytes: Uint8Array }[] = [];
  await model.save(
    tf.io.withSaveHandler(async (artifacts) => {
      const data = artifacts.weightData;
      const weights =
        data instanceof ArrayBuffer
          ? new Uint8Array(data)
          : new Uint8Array(await new Blob(data).arrayBuffer());
      const json = {
        modelTopology: artifacts.modelTopology,
        format: artifacts.format,
        generatedBy: artifacts.generatedBy,
        convertedBy: artifacts.convertedBy,
        weightsManifest: [{ paths: ["./weights.bin"], weights: artifacts.weightSpecs }],
      };
      files = [
        { name: "model.json", bytes: new TextEncoder().encode(JSON.stringify(json)) },
        { name: "weights.bin", bytes: weights },
      ];
      return { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: "JSON" } };
    }),
  );
  model.dispose();
  return { files };
}

/** A multipart body of `files` parts, as the form's upload sends it. */
export async function multipartOf(files: readonly { name: string; bytes: Uint8Array }[]): Promise<{
  body: Uint8Array;
  contentType: string;
}> {
  const form = new FormData();
  for (const file of files)
    form.append("files", new Blob([file.bytes as Uint8Array<ArrayBuffer>]), file.name);
  const response = new Response(form);
  return {
    body: new Uint8Array(await response.arrayBuffer()),
    contentType: response.headers.get("content-type") ?? "",
  };
}
