import * as tf from "@tensorflow/tfjs";

/** A model as `tf.LayersModel.save()` writes it: model.json and its weight shards, by file name. */
export interface SavedLayersModel {
  readonly files: { name: string; bytes: Uint8Array }[];
}

/** `model` as `tf.LayersModel.save()` writes it for a download: `model.json` naming `weights.bin`. */
export async function saveModelFiles(model: tf.LayersModel): Promise<SavedLayersModel> {
  let artifacts: tf.io.ModelArtifacts | undefined;
  await model.save(
    tf.io.withSaveHandler((saved) => {
      artifacts = saved;
      return Promise.resolve({ modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: "JSON" } });
    }),
  );
  if (artifacts?.weightData === undefined || artifacts.weightSpecs === undefined) {
    throw new Error("TF.js saved no weights");
  }
  const json = {
    modelTopology: artifacts.modelTopology,
    format: artifacts.format,
    generatedBy: artifacts.generatedBy,
    convertedBy: artifacts.convertedBy,
    weightsManifest: [{ paths: ["./weights.bin"], weights: artifacts.weightSpecs }],
  };
  return {
    files: [
      { name: "model.json", bytes: new TextEncoder().encode(JSON.stringify(json)) },
      { name: "weights.bin", bytes: new Uint8Array(tf.io.CompositeArrayBuffer.join(artifacts.weightData)) },
    ],
  };
}

/** A real TF.js Sequential model (inputs → hidden relu → classes softmax), saved by TF.js. */
export async function savedLayersModel(options: {
  inputs: number;
  hidden: number;
  classes: number;
}): Promise<SavedLayersModel> {
  await tf.setBackend("cpu");
  const model = tf.sequential();
  model.add(tf.layers.dense({ inputShape: [options.inputs], units: options.hidden, activation: "relu" }));
  model.add(tf.layers.dense({ units: options.classes, activation: "softmax" }));
  try {
    return await saveModelFiles(model);
  } finally {
    model.dispose();
  }
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
