import { execFile } from "node:child_process";

/**
 * A scrape read back by the reference Prometheus text-format parser: the official Python client's
 * (`prometheus_client.parser`, Debian's python3-prometheus-client, which scripts/test.sh installs),
 * for tests that check what a /metrics endpoint exposes. A line it cannot parse fails the test.
 */

/** The Python with Debian's packages (a Python on PATH may be another one). */
const PYTHON = process.env.BARNRAISE_TEST_PROMETHEUS_PYTHON ?? "/usr/bin/python3";

const PARSER = `
import json, math, sys
from prometheus_client.parser import text_string_to_metric_families
families = []
for family in text_string_to_metric_families(sys.stdin.read()):
    families.append({
        "name": family.name,
        "type": family.type,
        "help": family.documentation,
        # JSON has no NaN or infinities: those go as strings.
        "samples": [{"name": s.name, "labels": s.labels, "value": s.value if math.isfinite(s.value) else str(s.value)} for s in family.samples],
    })
print(json.dumps(families))
`;

export interface ScrapeSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface ScrapeFamily {
  /** The family's name (a counter's without `_total`). */
  readonly name: string;
  readonly type: string;
  readonly help: string;
  readonly samples: readonly ScrapeSample[];
}

export class Scrape {
  readonly families: readonly ScrapeFamily[];

  private constructor(families: readonly ScrapeFamily[]) {
    this.families = families;
  }

  /** Parses `text` with the Python client's parser; rejects with its message when it cannot. */
  static parse(text: string): Promise<Scrape> {
    return new Promise((resolve, reject) => {
      const child = execFile(PYTHON, ["-c", PARSER], { maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
        if (error !== null) {
          reject(new Error(`the Prometheus parser refused the scrape: ${stderr || error.message}`));
          return;
        }
        try {
          const families = JSON.parse(stdout) as (Omit<ScrapeFamily, "samples"> & {
            samples: (Omit<ScrapeSample, "value"> & { value: number | string })[];
          })[];
          resolve(
            new Scrape(
              families.map((family) => ({
                ...family,
                samples: family.samples.map((sample) => ({ ...sample, value: Number(sample.value) })),
              })),
            ),
          );
        } catch (parseError) {
          reject(parseError instanceof Error ? parseError : new Error(String(parseError)));
        }
      });
      child.stdin?.end(text);
    });
  }

  /** Every sample of every family, by sample name (`x_total`, `x_bucket`, `x_count`, …). */
  samples(name: string, labels: Readonly<Record<string, string>> = {}): ScrapeSample[] {
    return this.families
      .flatMap((family) => family.samples)
      .filter(
        (sample) =>
          sample.name === name &&
          Object.entries(labels).every(([key, value]) => sample.labels[key] === value),
      );
  }

  /** The value of the one sample `name` with `labels` among its labels; undefined when there is none. */
  value(name: string, labels: Readonly<Record<string, string>> = {}): number | undefined {
    const found = this.samples(name, labels);
    if (found.length > 1) throw new Error(`${found.length} samples ${name} match ${JSON.stringify(labels)}`);
    return found[0]?.value;
  }

  /** The values of the samples `name` that have `labels` among their labels, summed (0 for none). */
  sum(name: string, labels: Readonly<Record<string, string>> = {}): number {
    return this.samples(name, labels).reduce((total, sample) => total + sample.value, 0);
  }

  /** The family `name` (a counter without `_total`); throws when the scrape has none. */
  family(name: string): ScrapeFamily {
    const found = this.families.find((family) => family.name === name);
    if (found === undefined) throw new Error(`the scrape has no metric family ${name}`);
    return found;
  }
}
