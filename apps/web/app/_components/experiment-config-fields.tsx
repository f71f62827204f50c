import { AveragingStrategy } from "@barnraise/protocol";
import { UPLOADED_MODEL } from "@barnraise/protocol";
import { DatasetUpload } from "./dataset-upload.tsx";
import { AveragingFields } from "./experiment-averaging-fields.tsx";
import {
  albertSizes,
  DILOCO_TARGET_BATCH_SIZE,
  Field,
  lossOptions,
  modelKindOptions,
  taskOptions,
  type FieldErrors,
  type FormValues,
} from "./experiment-form-model.ts";
import { FieldError } from "./field-error.tsx";
import { formatCount } from "./format.ts";
import { fieldProps, inputId, Labelled } from "./labelled-field.tsx";
import { ModelUpload } from "./model-upload.tsx";

export interface ConfigFieldsProps {
  readonly values: FormValues;
  readonly errors: FieldErrors;
  readonly set: <K extends keyof FormValues>(key: K, value: FormValues[K]) => void;
  readonly changeOptimizer: (next: FormValues["optimizer"]) => void;
  readonly changeStrategy: (next: FormValues["strategy"]) => void;
}

/** The experiment form's training config: model, training, optimizer and averaging fields. */
export function ConfigFields({ values, errors, set, changeOptimizer, changeStrategy }: ConfigFieldsProps) {
  const field = (path: Field) => fieldProps(path, errors);
  const diloco = values.strategy === AveragingStrategy.diloco;
  return (
    <>
      <fieldset>
        <legend>Model</legend>
        <div className="stack">
          <Labelled path={Field.kind} label="Model kind" error={errors[Field.kind]}>
            <select
              {...field(Field.kind)}
              value={values.kind}
              onChange={(event) => {
                set("kind", event.target.value as FormValues["kind"]);
              }}
            >
              {modelKindOptions.map((option) => (
                <option key={option.value} value={option.value}>
                  {option.label}
                </option>
              ))}
            </select>
          </Labelled>
          {values.kind === "mnist-mlp" ? (
            <Labelled
              path={Field.hiddenUnits}
              label="Hidden layer sizes"
              hint="Units per hidden layer, separated by commas (1 to 8 layers)."
              error={errors[Field.hiddenUnits]}
            >
              <input
                {...field(Field.hiddenUnits)}
                value={values.hiddenUnits}
                onChange={(event) => {
                  set("hiddenUnits", event.target.value);
                }}
                inputMode="numeric"
              />
            </Labelled>
          ) : values.kind === UPLOADED_MODEL ? (
            <OwnModelFields values={values} errors={errors} set={set} />
          ) : (
            <div className="stack">
              <div className="field-row">
                {albertSizes.map(({ key, label, hint }) => (
                  <Labelled key={key} path={Field[key]} label={label} hint={hint} error={errors[Field[key]]}>
                    <input
                      {...field(Field[key])}
                      type="number"
                      value={values.albert[key]}
                      onChange={(event) => {
                        set("albert", { ...values.albert, [key]: event.target.value });
                      }}
                    />
                  </Labelled>
                ))}
              </div>
              <DatasetField
                values={values}
                errors={errors}
                set={set}
                hint="Empty: the Brown corpus. Or the name of a plain-text dataset you uploaded."
              />
            </div>
          )}
        </div>
      </fieldset>

      <fieldset>
        <legend>Training</legend>
        <div className="field-row">
          <Labelled
            path={Field.targetBatchSize}
            label={diloco ? "Target batch size (samples per round)" : "Target batch size"}
            hint={
              diloco
                ? `Samples all peers train on between two outer steps, e.g. ${formatCount(DILOCO_TARGET_BATCH_SIZE)}.`
                : "Samples the whole swarm gathers before each optimizer step."
            }
            error={errors[Field.targetBatchSize]}
          >
            <input
              {...field(Field.targetBatchSize)}
              type="number"
              min={1}
              value={values.targetBatchSize}
              onChange={(event) => {
                set("targetBatchSize", event.target.value);
              }}
            />
          </Labelled>
          <div className="field">
            <label htmlFor={inputId(Field.localBatchSize)}>Local batch size</label>
            <label className="check">
              <input
                type="checkbox"
                checked={values.localBatchAuto}
                onChange={(event) => {
                  set("localBatchAuto", event.target.checked);
                }}
              />
              <span>Automatic (from each device’s speed and memory)</span>
            </label>
            <input
              {...field(Field.localBatchSize)}
              type="number"
              min={1}
              disabled={values.localBatchAuto}
              value={values.localBatchAuto ? "" : values.localBatchSize}
              placeholder={values.localBatchAuto ? "automatic" : undefined}
              onChange={(event) => {
                set("localBatchSize", event.target.value);
              }}
            />
            <p id={`${inputId(Field.localBatchSize)}-hint`} className="hint">
              Samples per step on each volunteer’s machine.
            </p>
            <FieldError
              id={`${inputId(Field.localBatchSize)}-error`}
              message={errors[Field.localBatchSize]}
            />
          </div>
          <Labelled
            path={Field.maxSteps}
            label="Stop after (steps)"
            hint="Leave empty to train until you pause the run."
            error={errors[Field.maxSteps]}
          >
            <input
              {...field(Field.maxSteps)}
              type="number"
              min={1}
              value={values.maxSteps}
              onChange={(event) => {
                set("maxSteps", event.target.value);
              }}
            />
          </Labelled>
          <Labelled
            path={Field.checkpointEvery}
            label="Checkpoint every (steps)"
            hint="The aux peer uploads the model this often."
            error={errors[Field.checkpointEvery]}
          >
            <input
              {...field(Field.checkpointEvery)}
              type="number"
              min={1}
              value={values.checkpointEvery}
              onChange={(event) => {
                set("checkpointEvery", event.target.value);
              }}
            />
          </Labelled>
        </div>
      </fieldset>

      <AveragingFields
        values={values}
        errors={errors}
        set={set}
        changeOptimizer={changeOptimizer}
        changeStrategy={changeStrategy}
      />
    </>
  );
}

/** An uploaded model: its files, what it learns and with which loss, and the dataset it trains on. */
function OwnModelFields({ values, errors, set }: Pick<ConfigFieldsProps, "values" | "errors" | "set">) {
  const field = (path: Field) => fieldProps(path, errors);
  return (
    <div className="stack">
      <ModelUpload
        sha256={values.modelSha256}
        onUploaded={(model) => {
          set("modelSha256", model.sha256);
        }}
      />
      <Labelled
        path={Field.modelSha256}
        label="Model SHA-256"
        hint="Filled in when the platform accepts the upload; peers train exactly the model with this hash."
        error={errors[Field.modelSha256]}
      >
        <input {...field(Field.modelSha256)} value={values.modelSha256} readOnly spellCheck={false} />
      </Labelled>
      <div className="field-row">
        <Labelled path={Field.task} label="Task" error={errors[Field.task]}>
          <select
            {...field(Field.task)}
            value={values.task}
            onChange={(event) => {
              set("task", event.target.value as FormValues["task"]);
              set("loss", "");
            }}
          >
            {taskOptions.map((option) => (
              <option key={option.value} value={option.value}>
                {option.label}
              </option>
            ))}
          </select>
        </Labelled>
        <Labelled path={Field.loss} label="Loss" error={errors[Field.loss]}>
          <select
            {...field(Field.loss)}
            value={values.loss === "" ? (lossOptions(values.task)[0] ?? "") : values.loss}
            onChange={(event) => {
              set("loss", event.target.value);
            }}
          >
            {lossOptions(values.task).map((loss) => (
              <option key={loss} value={loss}>
                {loss}
              </option>
            ))}
          </select>
        </Labelled>
      </div>
      <DatasetField
        values={values}
        errors={errors}
        set={set}
        hint="The uploaded dataset the model trains on; filled in when an upload is converted."
      />
    </div>
  );
}

/** The dataset panel (upload and convert) and the name of the dataset the run trains on. */
function DatasetField({
  values,
  errors,
  set,
  hint,
}: Pick<ConfigFieldsProps, "values" | "errors" | "set"> & { readonly hint: string }) {
  const field = (path: Field) => fieldProps(path, errors);
  return (
    <div className="stack">
      <DatasetUpload
        onReady={(name) => {
          set("datasetName", name);
        }}
      />
      <Labelled
        path={Field.datasetName}
        label="Training dataset"
        hint={hint}
        error={errors[Field.datasetName]}
      >
        <input
          {...field(Field.datasetName)}
          value={values.datasetName}
          onChange={(event) => {
            set("datasetName", event.target.value);
          }}
          autoCapitalize="none"
          spellCheck={false}
        />
      </Labelled>
    </div>
  );
}
