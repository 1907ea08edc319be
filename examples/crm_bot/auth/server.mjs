// The example CRM's authorization server: oidc-provider (a certified OpenID provider) with the
// bridge's client for the client credentials grant and, when AUTH_PERSON_REDIRECT_URI is set, a
// second one with which the bridge acts as the person: authorization code with PKCE (required),
// refresh tokens and revocation, the people of AUTH_ACCOUNTS signing in on oidc-provider's own
// development login page (any password; a real deployment configures its own login). Access tokens are JWTs for one
// resource, the CRM's MCP server (RFC 8707 resource indicators: `aud` is its URL), with the scope
// crm.notes. Nothing of OAuth is written here; this file only configures the package.
//
// Environment: AUTH_ISSUER (http://127.0.0.1:<port>), AUTH_PORT, AUTH_RESOURCE (the MCP URL),
// AUTH_CLIENT_ID, AUTH_CLIENT_SECRET, AUTH_SCOPE (default crm.notes), AUTH_TOKEN_TTL (seconds,
// default 600), AUTH_JWKS_FILE (a private JWKS to sign with; without it a key is made at start);
// for the person client AUTH_PERSON_CLIENT_ID, AUTH_PERSON_CLIENT_SECRET, AUTH_PERSON_REDIRECT_URI
// and AUTH_ACCOUNTS (the account ids that may sign in, separated by spaces or commas).
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

const personRedirect = process.env.AUTH_PERSON_REDIRECT_URI;
const personClientId = process.env.AUTH_PERSON_CLIENT_ID || 'crm-bridge-person';
const accounts = new Set((process.env.AUTH_ACCOUNTS || '').split(/[\s,]+/).filter(Boolean));
const personClients = personRedirect ? [{
  client_id: personClientId,
  client_secret: env('AUTH_PERSON_CLIENT_SECRET'),
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  redirect_uris: [personRedirect],
  token_endpoint_auth_method: 'client_secret_basic',
  scope,
}] : [];

const provider = new Provider(issuer, {
  clients: [...personClients, {
    client_id: env('AUTH_CLIENT_ID'),
    client_secret: env('AUTH_CLIENT_SECRET'),
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
    scope,
  }],
  jwks: signingKeys(),
  ttl: { ClientCredentials: ttl, AccessToken: ttl },
  scopes: [scope],
  // Only the example's people exist (the development login page takes any name otherwise).
  findAccount: (ctx, id) => (accounts.has(id) ? { accountId: id, claims: () => ({ sub: id }) } : undefined),
  pkce: { required: () => true },
  // The person client is this deployment's own: a refresh token without asking for offline_access.
  issueRefreshToken: (ctx, client) => client.clientId === personClientId && client.grantTypeAllowed('refresh_token'),
  // ... and no consent screen for it (oidc-provider's "skipping consent" recipe): the grant is the
  // CRM's scope for the CRM's MCP server, nothing more.
  loadExistingGrant: async (ctx) => {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    if (ctx.oidc.client.clientId !== personClientId) return undefined;
    const grant = new ctx.oidc.provider.Grant({ clientId: personClientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope(scope);
    grant.addResourceScope(resource, scope);
    await grant.save();
    return grant;
  },
  features: {
    devInteractions: { enabled: Boolean(personRedirect) },
    revocation: { enabled: true },
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
provider.on('authorization_code.consumed', (code) => say('code_consumed', { client_id: code.clientId }));
for (const event of ['access_token.saved', 'access_token.issued']) {
  provider.on(event, (token) => say('access_token_issued', { client_id: token.clientId, sub: token.accountId }));
}
provider.on('grant.success', (ctx) => say('grant_success', { grant_type: ctx.oidc.params?.grant_type ?? null }));
provider.on('grant.revoked', (ctx, grantId) => say('grant_revoked', { client_id: ctx.oidc?.client?.clientId ?? null }));
provider.on('grant.error', (ctx, error) => say('token_refused', { client_id: ctx.oidc?.client?.clientId ?? null, error: error.error }));

provider.listen(Number(env('AUTH_PORT')), '127.0.0.1', () => say('listening', { issuer }));
