// The example CRM's authorization server: oidc-provider (a certified OpenID provider) with one
// client, the bridge's, that may use the client credentials grant. Access tokens are JWTs for one
// resource, the CRM's MCP server (RFC 8707 resource indicators: `aud` is its URL), with the scope
// crm.notes. Nothing of OAuth is written here; this file only configures the package.
//
// Environment: AUTH_ISSUER (http://127.0.0.1:<port>), AUTH_PORT, AUTH_RESOURCE (the MCP URL),
// AUTH_CLIENT_ID, AUTH_CLIENT_SECRET, AUTH_SCOPE (default crm.notes), AUTH_TOKEN_TTL (seconds,
// default 600), AUTH_JWKS_FILE (a private JWKS to sign with; without it a key is made at start).
// One JSON line per token issued or refused goes to stdout: tests count them.
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const env = (name, fallback) => {
  const value = process.env[name] || fallback;
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};
const issuer = env('AUTH_ISSUER');
const resource = env('AUTH_RESOURCE');
const scope = env('AUTH_SCOPE', 'crm.notes');
const ttl = Number(env('AUTH_TOKEN_TTL', '600'));

function signingKeys() {
  if (process.env.AUTH_JWKS_FILE) return JSON.parse(readFileSync(process.env.AUTH_JWKS_FILE, 'utf8'));
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { keys: [{ ...privateKey.export({ format: 'jwk' }), use: 'sig', alg: 'RS256', kid: `k${Date.now()}` }] };
}

const provider = new Provider(issuer, {
  clients: [{
    client_id: env('AUTH_CLIENT_ID'),
    client_secret: env('AUTH_CLIENT_SECRET'),
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
    scope,
  }],
  jwks: signingKeys(),
  ttl: { ClientCredentials: ttl },
  scopes: [scope],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // A client that names no resource still gets a token for the one resource there is.
      defaultResource: () => resource,
      getResourceServerInfo: (ctx, indicator) => {
        if (indicator.replace(/\/$/, '') !== resource.replace(/\/$/, '')) throw new Provider.errors.InvalidTarget();
        return { scope, audience: resource, accessTokenTTL: ttl, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } } };
      },
    },
  },
});
// Behind no proxy, on loopback: plain http is this example's choice (a real deployment uses https).
provider.proxy = false;

const say = (event, fields) => console.log(JSON.stringify({ event, ...fields }));
provider.on('client_credentials.issued', (token) => say('token_issued', { client_id: token.clientId, aud: token.aud }));
provider.on('grant.error', (ctx, error) => say('token_refused', { client_id: ctx.oidc?.client?.clientId ?? null, error: error.error }));

provider.listen(Number(env('AUTH_PORT')), '127.0.0.1', () => say('listening', { issuer }));
