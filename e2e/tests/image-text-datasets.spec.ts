import { expect, test } from "@playwright/test";
import sharp from "sharp";
import yazl from "yazl";
import { baseURL } from "../support/run-env.ts";
import { register, screenshots } from "../support/ui.ts";

// An organizer brings images and text through the form's dataset panel: a zip without class
// folders is refused with its reason, a zip of class folders becomes an image dataset resized to
// the size asked for, and a plain text becomes the dataset a masked language model is published on.

/** A PNG of one colour. */
async function png(width: number, height: number, rgb: readonly [number, number, number]): Promise<Buffer> {
  const [r, g, b] = rgb;
  return await sharp({ create: { width, height, channels: 3, background: { r, g, b } } })
    .png()
    .toBuffer();
}

async function zipOf(files: readonly (readonly [string, Buffer])[]): Promise<Buffer> {
  const zip = new yazl.ZipFile();
  for (const [name, bytes] of files) zip.addBuffer(bytes, name);
  zip.end();
  const chunks: Buffer[] = [];
  for await (const chunk of zip.outputStream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

test("an organizer imports an image archive and a text through the form", async ({ page }, testInfo) => {
  test.setTimeout(3 * 60_000);
  const suffix = Date.now().toString(36);
  const experimentId = `stories-${suffix}`;
  const imagesName = `shapes-${suffix}`;
  const textName = `stories-${suffix}`;

  await register(page, `organizer-${suffix}`);
  await page.goto("/experiments/new");
  await page.getByLabel("Experiment id").fill(experimentId);
  await page.getByLabel("Name", { exact: true }).fill(`Stories ${suffix}`);
  await page.getByLabel("Model kind").selectOption("uploaded");

  await test.step("an archive without class folders is refused with the reason", async () => {
    await page.getByLabel("Kind of data").selectOption("images");
    const flat = await zipOf([
      ["1.png", await png(10, 10, [200, 0, 0])],
      ["2.png", await png(10, 10, [0, 0, 200])],
    ]);
    await page
      .getByLabel("Dataset file (zip of class folders)")
      .setInputFiles({ name: "flat.zip", mimeType: "application/zip", buffer: flat });
    await page.getByLabel("Dataset name").fill(`flat-${suffix}`);
    await page.getByRole("button", { name: "Upload dataset" }).click();
    await expect(page.getByTestId("dataset-upload-error")).toContainText(
      "the archive has no class folders: put each class's images in a folder named after the class",
      { timeout: 60_000 },
    );
  });

  await test.step("a zip of class folders becomes an image dataset of the size asked for", async () => {
    const files: [string, Buffer][] = [];
    for (let i = 0; i < 20; i++) files.push([`shapes/red/${i}.png`, await png(30, 20, [220, 10, 10])]);
    for (let i = 0; i < 20; i++) files.push([`shapes/blue/${i}.png`, await png(16, 40, [10, 10, 220])]);
    await page
      .getByLabel("Dataset file (zip of class folders)")
      .setInputFiles({ name: "shapes.zip", mimeType: "application/zip", buffer: await zipOf(files) });
    await page.getByLabel("Dataset name").fill(imagesName);
    await page.getByLabel("Width (pixels)").fill("8");
    await page.getByLabel("Height (pixels)").fill("6");
    await page.getByLabel("Colour").selectOption("1");
    await page.getByRole("button", { name: "Upload dataset" }).click();
    await expect(page.getByTestId("dataset-upload-ready")).toContainText(
      `${imagesName} ready: 40 records (36 train / 4 test)`,
      { timeout: 60_000 },
    );
    await expect(page.getByLabel("Training dataset")).toHaveValue(imagesName);
    const manifest = (await (await page.request.get(`/api/v1/datasets/${imagesName}`)).json()) as {
      format: string;
      record: { image: { width: number; height: number; channels: number }; label: { classes: string[] } };
    };
    expect(manifest.format).toBe("image-u8");
    expect(manifest.record.image).toMatchObject({ width: 8, height: 6, channels: 1 });
    expect(manifest.record.label.classes).toEqual(["blue", "red"]);
    await screenshots(page, testInfo, "image-dataset-ready");
  });

  await test.step("a plain text becomes the masked language model's dataset, and the run is published", async () => {
    await page.getByLabel("Model kind").selectOption("albert-mlm");
    await page.getByLabel("Kind of data").selectOption("text");
    const text = "The quick brown fox jumps over the lazy dog.\nA second line of the story, with a comma.\n";
    await page
      .getByLabel("Dataset file (plain text)")
      .setInputFiles({ name: "story.txt", mimeType: "text/plain", buffer: Buffer.from(text.repeat(40)) });
    await page.getByLabel("Dataset name").fill(textName);
    await page.getByLabel("Dataset vocabulary size").fill("64");
    await page.getByRole("button", { name: "Upload dataset" }).click();
    await expect(page.getByTestId("dataset-upload-ready")).toContainText(
      `${textName} ready: 80 records (76 train / 4 test)`,
      { timeout: 60_000 },
    );
    await expect(page.getByLabel("Training dataset")).toHaveValue(textName);
    await page.getByRole("button", { name: "Create experiment" }).click();
    await page.waitForURL(`${baseURL}/experiments/${experimentId}/manage`);
    const experiment = (await (await page.request.get(`/api/v1/experiments/${experimentId}`)).json()) as {
      config: { model: { kind: string }; dataset: { name: string } };
    };
    expect(experiment.config.model.kind).toBe("albert-mlm");
    expect(experiment.config.dataset.name).toBe(textName);
  });
});
