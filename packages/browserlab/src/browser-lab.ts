import { readFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { basename } from "node:path";
import { build } from "esbuild";
import { chromium, type Browser, type BrowserContext, type JSHandle, type Page } from "playwright-core";

/**
 * A lab for code that runs in browsers: one headless Chromium (Debian's, at `CHROMIUM_PATH`, default
 * /usr/bin/chromium) and a page server on 127.0.0.1. A page opens at the server's origin, a local
 * one, so Chromium lets it open WebSockets to this machine (a page of a public origin would need the
 * local network access permission), and runs a TypeScript entry bundled by esbuild for
 * `platform: "browser"`: what it puts on `globalThis` is the test's handle. The pages share one
 * browser profile, as the tabs of one browser do: what one stores in IndexedDB, the next finds.
 */

export interface BrowserLabOptions {
  /** Files the pages may fetch, by their name at the server's root (`/<name>`): wasm binaries, say. */
  readonly files?: readonly string[];
}

export interface LabPage<T> {
  readonly page: Page;
  /** What the entry put on `globalThis`, to drive with `handle.evaluate((it, arg) => …, arg)`. */
  readonly handle: JSHandle<T>;
  /** The uncaught errors the page has thrown so far. */
  readonly errors: readonly string[];
}

const CONTENT_TYPES: Readonly<Record<string, string>> = { wasm: "application/wasm", js: "text/javascript" };

export class BrowserLab {
  readonly #browser: Browser;
  readonly #context: BrowserContext;
  readonly #server: Server;
  /** The page server's origin, with a trailing slash: where `files` are served. */
  readonly origin: string;
  readonly #pages: Page[] = [];

  private constructor(browser: Browser, context: BrowserContext, server: Server, origin: string) {
    this.#browser = browser;
    this.#context = context;
    this.#server = server;
    this.origin = origin;
  }

  static async start(options: BrowserLabOptions = {}): Promise<BrowserLab> {
    const files = new Map((options.files ?? []).map((path) => [basename(path), path]));
    const server = createServer((request, response) => {
      const name = decodeURIComponent(new URL(request.url ?? "/", "http://lab").pathname.slice(1));
      const path = files.get(name);
      if (path === undefined) {
        response.setHeader("content-type", "text/html");
        response.end("<!doctype html><title>lab</title>");
        return;
      }
      readFile(path).then(
        (bytes) => {
          response.setHeader(
            "content-type",
            CONTENT_TYPES[name.split(".").pop() ?? ""] ?? "application/octet-stream",
          );
          response.end(bytes);
        },
        () => {
          response.statusCode = 404;
          response.end();
        },
      );
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    const executablePath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
    try {
      const browser = await chromium.launch({ executablePath, headless: true });
      return new BrowserLab(browser, await browser.newContext(), server, origin);
    } catch (error) {
      server.close();
      throw error;
    }
  }

  /**
   * Opens a page that runs `entry` (a TypeScript file) bundled for the browser, waits until it has
   * set `globalThis[handle]`, and returns that as a handle of type `T` (the entry's own type). Node.js built-ins imported only dynamically (as Emscripten builds
   * do when they run in Node.js) are left out of the bundle.
   */
  async open<T>(entry: string, handle: string): Promise<LabPage<T>> {
    const built = await build({
      entryPoints: [entry],
      bundle: true,
      platform: "browser",
      format: "esm",
      write: false,
      logLevel: "error",
      external: ["node:*"],
    });
    const page = await this.#context.newPage();
    this.#pages.push(page);
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(error.message));
    await page.goto(this.origin);
    await page.addScriptTag({
      content: built.outputFiles.map((file) => file.text).join("\n"),
      type: "module",
    });
    await page.waitForFunction((name) => name in globalThis, handle);
    const found = await page.evaluateHandle(
      (name) => (globalThis as unknown as Record<string, unknown>)[name] as T,
      handle,
    );
    return { page, handle: found, errors };
  }

  /** Closes the pages opened so far. */
  async closePages(): Promise<void> {
    await Promise.all(this.#pages.splice(0).map((page) => page.close()));
  }

  async stop(): Promise<void> {
    await this.closePages();
    await this.#browser.close();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}
