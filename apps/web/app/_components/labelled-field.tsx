import type { ReactNode } from "react";
import type { Field, FieldErrors } from "./experiment-form-model.ts";
import { FieldError } from "./field-error.tsx";

/** The experiment form's field layout: a label, the control, a hint and the field's error. */

export function inputId(path: Field): string {
  return `experiment-${path.replace(/\./g, "-")}`;
}

/** The attributes that tie a control to its label, hint and error. */
export function fieldProps(path: Field, errors: FieldErrors) {
  return {
    id: inputId(path),
    "aria-invalid": errors[path] ? (true as const) : undefined,
    "aria-describedby": `${inputId(path)}-hint ${inputId(path)}-error`,
  };
}

export function Labelled({
  path,
  label,
  hint,
  error,
  children,
}: {
  readonly path: Field;
  readonly label: string;
  readonly hint?: string;
  readonly error: string | undefined;
  readonly children: ReactNode;
}) {
  const id = inputId(path);
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {children}
      {hint ? (
        <p id={`${id}-hint`} className="hint">
          {hint}
        </p>
      ) : null}
      <FieldError id={`${id}-error`} message={error} />
    </div>
  );
}
