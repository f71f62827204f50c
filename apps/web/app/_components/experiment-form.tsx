"use client";

import type { ExperimentConfig } from "@barnraise/protocol";
import { useRouter } from "next/navigation";
import { useState, type SubmitEvent } from "react";
import { callApi, describeFailure } from "./api-client.ts";
import { ConfigFields } from "./experiment-config-fields.tsx";
import {
  buildConfig,
  defaultLearningRate,
  Field,
  fieldOrder,
  formValuesOf,
  placeIssues,
  withStrategy,
  type FieldErrors,
  type FormValues,
} from "./experiment-form-model.ts";
import { fieldProps, inputId, Labelled } from "./labelled-field.tsx";

export type ExperimentFormProps =
  | { readonly mode: "create"; readonly initialConfig: ExperimentConfig }
  | {
      readonly mode: "edit";
      readonly experiment: { id: string; name: string; description: string; configVersion: number };
      readonly initialConfig: ExperimentConfig;
    };

interface SavedExperiment {
  readonly id: string;
  readonly configVersion: number;
}

type Status = { kind: "error" | "ok" | "info"; text: string } | null;

/** Creates an experiment, or edits one: its name, description and training config. */
export function ExperimentForm(props: ExperimentFormProps) {
  const router = useRouter();
  const existing = props.mode === "edit" ? props.experiment : { id: "", name: "", description: "" };
  const [values, setValues] = useState<FormValues>(() => formValuesOf(existing, props.initialConfig));
  const [errors, setErrors] = useState<FieldErrors>({});
  const [status, setStatus] = useState<Status>(null);
  const [busy, setBusy] = useState(false);

  /** Shows the errors and moves the focus to the first field that has one. */
  const showErrors = (found: FieldErrors) => {
    setErrors(found);
    const first = fieldOrder.find((path) => found[path] !== undefined);
    if (first !== undefined) {
      requestAnimationFrame(() => {
        document.getElementById(inputId(first))?.focus();
      });
    }
  };

  const set = <K extends keyof FormValues>(key: K, value: FormValues[K]) => {
    setValues((current) => ({ ...current, [key]: value }));
  };

  const changeOptimizer = (next: FormValues["optimizer"]) => {
    setValues((current) => {
      // A learning rate left at the old optimizer's default follows the new one's default.
      const untouched = Number(current.learningRate) === defaultLearningRate(current.optimizer);
      return {
        ...current,
        optimizer: next,
        learningRate: untouched ? String(defaultLearningRate(next)) : current.learningRate,
      };
    });
  };

  const changeStrategy = (next: FormValues["strategy"]) => {
    setValues((current) => withStrategy(current, next));
  };

  async function submit(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    const found: FieldErrors = {};
    if (props.mode === "create" && values.id.trim() === "") found[Field.id] = "Choose an id.";
    if (values.name.trim() === "") found[Field.name] = "Give the experiment a name.";
    const built = buildConfig(values, props.initialConfig);
    if (!built.ok || Object.keys(found).length > 0) {
      const configErrors = built.ok ? {} : built.errors;
      showErrors({ ...configErrors, ...found });
      const other = built.ok ? [] : built.other;
      setStatus({ kind: "error", text: ["Fix the highlighted fields.", ...other].join(" ") });
      return;
    }

    setErrors({});
    setBusy(true);
    setStatus({ kind: "info", text: props.mode === "create" ? "Creating the experiment…" : "Saving…" });
    const body = {
      name: values.name.trim(),
      description: values.description,
      config: built.config,
    };
    const result =
      props.mode === "create"
        ? await callApi<SavedExperiment>("POST", "/api/v1/experiments", { id: values.id.trim(), ...body })
        : await callApi<SavedExperiment>(
            "PATCH",
            `/api/v1/experiments/${encodeURIComponent(props.experiment.id)}`,
            body,
          );
    setBusy(false);
    if (!result.ok) {
      const placed = placeIssues(result.issues);
      showErrors(placed.errors);
      const fieldCount = Object.keys(placed.errors).length;
      setStatus({
        kind: "error",
        text:
          fieldCount > 0
            ? ["Fix the highlighted fields.", ...placed.other].join(" ")
            : describeFailure(result),
      });
      return;
    }
    if (props.mode === "create") {
      router.push(`/experiments/${encodeURIComponent(result.data.id)}/manage`);
      return;
    }
    const { configVersion } = result.data;
    setStatus({
      kind: "ok",
      text:
        configVersion === props.experiment.configVersion
          ? "Saved."
          : `Saved. Peers receive config version ${configVersion} when they next fetch it.`,
    });
    router.refresh();
  }

  const field = (path: Field) => fieldProps(path, errors);

  return (
    <form className="form" onSubmit={(event) => void submit(event)} noValidate>
      <fieldset>
        <legend>About</legend>
        <div className="stack">
          {props.mode === "create" ? (
            <Labelled
              path={Field.id}
              label="Experiment id"
              hint="Used in links and in the join command; letters, digits, “_” and “-”."
              error={errors[Field.id]}
            >
              <input
                {...field(Field.id)}
                name="id"
                value={values.id}
                onChange={(event) => {
                  set("id", event.target.value);
                }}
                autoCapitalize="none"
                spellCheck={false}
                maxLength={64}
                required
              />
            </Labelled>
          ) : null}
          <Labelled path={Field.name} label="Name" error={errors[Field.name]}>
            <input
              {...field(Field.name)}
              name="name"
              value={values.name}
              onChange={(event) => {
                set("name", event.target.value);
              }}
              maxLength={100}
              required
            />
          </Labelled>
          <Labelled
            path={Field.description}
            label="Description"
            hint="What the run trains and why; shown on its public page."
            error={errors[Field.description]}
          >
            <textarea
              {...field(Field.description)}
              name="description"
              value={values.description}
              onChange={(event) => {
                set("description", event.target.value);
              }}
              maxLength={5000}
            />
          </Labelled>
        </div>
      </fieldset>

      <ConfigFields
        values={values}
        errors={errors}
        set={set}
        changeOptimizer={changeOptimizer}
        changeStrategy={changeStrategy}
      />

      <div className="actions">
        <button type="submit" className="button" disabled={busy}>
          {props.mode === "create"
            ? busy
              ? "Creating…"
              : "Create experiment"
            : busy
              ? "Saving…"
              : "Save changes"}
        </button>
      </div>
      <p role="status" className={status ? `notice notice-${status.kind}` : "visually-hidden"}>
        {status?.text ?? ""}
      </p>
    </form>
  );
}
