export * from "./identity-file.ts";
export * from "./identity-command.ts";
