import { generateKeyPairSync } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import Provider from "oidc-provider";
import { e2eRun, oidcProfile } from "./run-env.ts";

/**
 * A real OpenID Connect provider on loopback (oidc-provider with its development login and consent
 * pages), registered with the platform as BARNRAISE_OIDC_PROVIDERS. Any login and password sign in;
 * the account's profile comes from `oidcProfile(login)`.
 */

export interface RunningOidcProvider {
  readonly issuer: string;
  close(): Promise<void>;
}

export async function startOidcProvider(): Promise<RunningOidcProvider> {
  const { oidc, baseURL } = e2eRun;
  // A signing key of its own, so the provider does not fall back to its published development key.
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const provider = new Provider(oidc.issuer, {
    clients: [
      {
        client_id: oidc.clientId,
        client_secret: oidc.clientSecret,
        redirect_uris: [`${baseURL}/api/auth/callback/${oidc.id}`],
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_basic",
      },
    ],
    claims: {
      openid: ["sub"],
      profile: ["preferred_username", "name"],
      email: ["email", "email_verified"],
    },
    // Put the profile in the ID token, where Auth.js reads it.
    conformIdTokenClaims: false,
    cookies: { keys: [oidc.cookieKey] },
    features: { devInteractions: { enabled: true } },
    jwks: { keys: [{ ...privateKey.export({ format: "jwk" }), alg: "RS256", use: "sig", kid: "e2e" }] },
    findAccount: (_ctx, id) => ({
      accountId: id,
      claims: () => ({ sub: id, ...oidcProfile(id), email_verified: true }),
    }),
  });

  const server = createServer(provider.callback());
  await listen(server, oidc.port);
  const address = server.address() as AddressInfo;
  if (address.port !== oidc.port)
    throw new Error(`the OIDC provider listens on ${address.port}, not ${oidc.port}`);
  return {
    issuer: oidc.issuer,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => {
          if (error) reject(error);
          else resolve();
        });
      }),
  };
}

function listen(server: Server, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) => {
      reject(
        error.code === "EADDRINUSE"
          ? new Error(`port ${port} for the OIDC provider is in use (set E2E_OIDC_PORT to another port)`)
          : error,
      );
    });
    // No host: the server takes both ::1 and 127.0.0.1, whichever "localhost" resolves to.
    server.listen(port, () => {
      resolve();
    });
  });
}
