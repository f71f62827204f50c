import { Aggregation, AveragingStrategy, CompressionMethod } from "@barnraise/protocol";
import {
  aggregationOptions,
  compressionOptions,
  Field,
  strategyOptions,
  withCompression,
  type FieldErrors,
  type FormValues,
} from "./experiment-form-model.ts";
import { FieldError } from "./field-error.tsx";
import { fieldProps, inputId, Labelled } from "./labelled-field.tsx";

export interface AveragingFieldsProps {
  readonly values: FormValues;
  readonly errors: FieldErrors;
  readonly set: <K extends keyof FormValues>(key: K, value: FormValues[K]) => void;
  readonly changeOptimizer: (next: FormValues["optimizer"]) => void;
  readonly changeStrategy: (next: FormValues["strategy"]) => void;
}

const strategyHints: Record<FormValues["strategy"], string> = {
  dedloc:
    "Peers accumulate gradients to the target batch, average them and all take the same optimizer step.",
  diloco:
    "Each peer takes optimizer steps on its own batches for a round, then the peers average how far they moved and all take one outer step: far less traffic than averaging every step.",
};

/**
 * The experiment form's optimizer and averaging fields: the averaging strategy (with DiLoCo's outer
 * optimizer), the (inner) optimizer, the compression (with top-k's density) and the averaging groups.
 */
export function AveragingFields({
  values,
  errors,
  set,
  changeOptimizer,
  changeStrategy,
}: AveragingFieldsProps) {
  const field = (path: Field) => fieldProps(path, errors);
  const diloco = values.strategy === AveragingStrategy.diloco;
  const topk = values.compression === CompressionMethod.topk;
  const clip = values.aggregation === Aggregation.centeredClip;
  return (
    <fieldset>
      <legend>Optimizer and averaging</legend>
      <Labelled
        path={Field.strategy}
        label="Averaging strategy"
        hint={strategyHints[values.strategy]}
        error={errors[Field.strategy]}
      >
        <select
          {...field(Field.strategy)}
          value={values.strategy}
          onChange={(event) => {
            changeStrategy(event.target.value as FormValues["strategy"]);
          }}
        >
          {strategyOptions.map((option) => (
            <option key={option.value} value={option.value}>
              {option.label}
            </option>
          ))}
        </select>
      </Labelled>
      {diloco ? (
        <>
          <div className="field-row field-spaced">
            <Labelled
              path={Field.outerLearningRate}
              label="Outer learning rate"
              hint="Of the outer step on the averaged pseudo-gradient; DiLoCo uses 0.7."
              error={errors[Field.outerLearningRate]}
            >
              <input
                {...field(Field.outerLearningRate)}
                inputMode="decimal"
                value={values.outerLearningRate}
                onChange={(event) => {
                  set("outerLearningRate", event.target.value);
                }}
              />
            </Labelled>
            <Labelled
              path={Field.outerMomentum}
              label="Outer momentum"
              hint="From 0 up to, not including, 1; DiLoCo uses 0.9."
              error={errors[Field.outerMomentum]}
            >
              <input
                {...field(Field.outerMomentum)}
                inputMode="decimal"
                value={values.outerMomentum}
                onChange={(event) => {
                  set("outerMomentum", event.target.value);
                }}
              />
            </Labelled>
          </div>
          <Check
            path={Field.outerNesterov}
            label="Nesterov momentum on the outer step"
            checked={values.outerNesterov}
            errors={errors}
            onChange={(checked) => {
              set("outerNesterov", checked);
            }}
          />
        </>
      ) : null}

      <div className="field-row field-spaced">
        <Labelled
          path={Field.optimizer}
          label="Optimizer"
          hint={diloco ? "The inner optimizer of each peer’s local steps." : undefined}
          error={errors[Field.optimizer]}
        >
          <select
            {...field(Field.optimizer)}
            value={values.optimizer}
            onChange={(event) => {
              changeOptimizer(event.target.value as FormValues["optimizer"]);
            }}
          >
            <option value="adam">Adam</option>
            <option value="lamb">LAMB (for large batches)</option>
          </select>
        </Labelled>
        <Labelled
          path={Field.learningRate}
          label="Learning rate"
          hint={diloco ? "Of the inner optimizer." : undefined}
          error={errors[Field.learningRate]}
        >
          <input
            {...field(Field.learningRate)}
            inputMode="decimal"
            value={values.learningRate}
            onChange={(event) => {
              set("learningRate", event.target.value);
            }}
          />
        </Labelled>
        <Labelled
          path={Field.compression}
          label="Compression"
          hint={`How ${diloco ? "pseudo-gradients" : "gradients"} travel between peers. ${
            topk
              ? "Top-k sends the largest values of each block in 2 bits and carries the rest into the next round (error feedback)."
              : "Adaptive sends large tensors in blockwise 8-bit and small ones in fp16."
          }`}
          error={errors[Field.compression]}
        >
          <select
            {...field(Field.compression)}
            value={values.compression}
            onChange={(event) => {
              const next = withCompression(values, event.target.value as FormValues["compression"]);
              set("compression", next.compression);
              set("outerLearningRate", next.outerLearningRate);
              set("outerMomentum", next.outerMomentum);
            }}
          >
            {compressionOptions.map((option) => (
              <option key={option.value} value={option.value}>
                {option.label}
              </option>
            ))}
          </select>
        </Labelled>
        {topk ? (
          <Labelled
            path={Field.topkDensity}
            label="Top-k density"
            hint="The share of each block’s values sent, from 0.0001 to 1 (0.015 sends 1.5 %)."
            error={errors[Field.topkDensity]}
          >
            <input
              {...field(Field.topkDensity)}
              inputMode="decimal"
              value={values.topkDensity}
              onChange={(event) => {
                set("topkDensity", event.target.value);
              }}
            />
          </Labelled>
        ) : null}
        {topk ? (
          <Labelled
            path={Field.errorFeedbackDecay}
            label="Error-feedback decay"
            hint="How much of what a round did not send carries into the next, from 0 to 1 (0.95, as SparseLoCo; 1 keeps all of it)."
            error={errors[Field.errorFeedbackDecay]}
          >
            <input
              {...field(Field.errorFeedbackDecay)}
              inputMode="decimal"
              value={values.errorFeedbackDecay}
              onChange={(event) => {
                set("errorFeedbackDecay", event.target.value);
              }}
            />
          </Labelled>
        ) : null}
        <Labelled
          path={Field.maxGroupSize}
          label="Largest averaging group"
          hint="Bigger swarms average in Moshpit groups of about this size."
          error={errors[Field.maxGroupSize]}
        >
          <input
            {...field(Field.maxGroupSize)}
            type="number"
            min={2}
            value={values.maxGroupSize}
            onChange={(event) => {
              set("maxGroupSize", event.target.value);
            }}
          />
        </Labelled>
        <Labelled
          path={Field.aggregation}
          label="Aggregation"
          hint={
            clip
              ? "Each reducer clips every peer’s contribution to a radius around a robust centre, so one peer sending a huge, sign-flipped or otherwise bad vector moves the average only a little."
              : "The weighted mean of every peer’s contribution. Values that are not finite are refused either way."
          }
          error={errors[Field.aggregation]}
        >
          <select
            {...field(Field.aggregation)}
            value={values.aggregation}
            onChange={(event) => {
              set("aggregation", event.target.value as FormValues["aggregation"]);
            }}
          >
            {aggregationOptions.map((option) => (
              <option key={option.value} value={option.value}>
                {option.label}
              </option>
            ))}
          </select>
        </Labelled>
        {clip ? (
          <>
            <Labelled
              path={Field.clipTau}
              label="Clipping radius τ"
              hint="In typical distances of a peer’s contribution from the centre, from 0.1 to 100: smaller resists attackers more, larger stays closer to the mean."
              error={errors[Field.clipTau]}
            >
              <input
                {...field(Field.clipTau)}
                inputMode="decimal"
                value={values.clipTau}
                onChange={(event) => {
                  set("clipTau", event.target.value);
                }}
              />
            </Labelled>
            <Labelled
              path={Field.clipIterations}
              label="CenteredClip iterations"
              hint="Clipping steps per chunk, from 1 to 100."
              error={errors[Field.clipIterations]}
            >
              <input
                {...field(Field.clipIterations)}
                type="number"
                min={1}
                max={100}
                value={values.clipIterations}
                onChange={(event) => {
                  set("clipIterations", event.target.value);
                }}
              />
            </Labelled>
          </>
        ) : null}
      </div>
      <Check
        path={Field.loadBalancing}
        label="Balance the averaging load by each peer’s bandwidth"
        checked={values.loadBalancing}
        errors={errors}
        onChange={(checked) => {
          set("loadBalancing", checked);
        }}
      />
      <Check
        path={Field.delayedParameterUpdates}
        label={
          diloco
            ? "Overlap averaging with compute: the outer all-reduce runs during the next round’s inner steps (applied one round late)"
            : "Delayed parameter updates: average in the background while computing the next batch (applied one step late)"
        }
        checked={values.delayedParameterUpdates}
        errors={errors}
        onChange={(checked) => {
          set("delayedParameterUpdates", checked);
        }}
      />
    </fieldset>
  );
}

/** A checkbox of the form with its error. */
function Check({
  path,
  label,
  checked,
  errors,
  onChange,
}: {
  readonly path: Field;
  readonly label: string;
  readonly checked: boolean;
  readonly errors: FieldErrors;
  readonly onChange: (checked: boolean) => void;
}) {
  return (
    <div className="field field-spaced">
      <label className="check">
        <input
          {...fieldProps(path, errors)}
          type="checkbox"
          checked={checked}
          onChange={(event) => {
            onChange(event.target.checked);
          }}
        />
        <span>{label}</span>
      </label>
      <FieldError id={`${inputId(path)}-error`} message={errors[path]} />
    </div>
  );
}
