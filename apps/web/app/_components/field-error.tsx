/** The message under a form field that failed validation; empty (but present for aria-describedby) otherwise. */
export function FieldError({ id, message }: { readonly id: string; readonly message: string | undefined }) {
  return (
    <p id={id} className="field-error" hidden={message === undefined}>
      {message}
    </p>
  );
}
