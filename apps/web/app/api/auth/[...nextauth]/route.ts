import { handlers } from "../../../../src/server/auth/auth.ts";

export const { GET, POST } = handlers;
