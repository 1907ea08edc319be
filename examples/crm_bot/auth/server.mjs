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
//
// Approvers log in here too, when AUTH_LOGIN_CLIENT_ID is set: the approval page
// (scripts/approval_page.py --oidc-issuer) is a second client, with the authorization code grant and
// PKCE, redirecting to AUTH_LOGIN_REDIRECT_URI, authenticating with AUTH_LOGIN_CLIENT_SECRET. Its users
// are AUTH_APPROVERS, JSON {"<user>": {"roles": [...], "password_hash": "scrypt$<salt>$<hash>"}}
// (scripts/approval_page.py hash makes a hash; passwords never come here). The ID token carries
// `sub` and `roles`. The login page is the one thing written here: a form that checks the password.
import { generateKeyPairSync, randomBytes, scryptSync, timingSafeEqual } from 'node:crypto';
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

const loginClient = process.env.AUTH_LOGIN_CLIENT_ID;
const approvers = loginClient ? JSON.parse(env('AUTH_APPROVERS')) : {};
const loginClients = loginClient ? [{
  client_id: loginClient,
  client_secret: env('AUTH_LOGIN_CLIENT_SECRET'),
  grant_types: ['authorization_code'],
  response_types: ['code'],
  redirect_uris: [env('AUTH_LOGIN_REDIRECT_URI')],
  token_endpoint_auth_method: 'client_secret_basic',
  scope: 'openid roles',
}] : [];

// The same scrypt parameters as scripts/approval_page.py: n=2**15, r=8, p=1, 32 bytes.
function passwordMatches(password, stored) {
  const [kind, salt, digest] = String(stored).split('$');
  if (kind !== 'scrypt' || !salt || !digest) return false;
  const expected = Buffer.from(digest, 'base64');
  const got = scryptSync(password, Buffer.from(salt, 'base64'), 32, { N: 2 ** 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 });
  return expected.length === got.length && timingSafeEqual(expected, got);
}
const decoyHash = `scrypt$${randomBytes(16).toString('base64')}$${randomBytes(32).toString('base64')}`;

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

const say = (event, fields) => console.log(JSON.stringify({ event, ...fields }));

const provider = new Provider(issuer, {
  clients: [...loginClients, ...personClients, {
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
  scopes: [scope, 'openid', 'roles'],
  claims: { openid: ['sub'], roles: ['roles'] },
  // The approval page reads the roles from the ID token.
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  // The approvers (with their roles) and the example's people; nobody else exists (the development
  // login page would take any name otherwise).
  findAccount: (ctx, id) => {
    if (Object.hasOwn(approvers, id)) return { accountId: id, claims: () => ({ sub: id, roles: approvers[id].roles }) };
    return accounts.has(id) ? { accountId: id, claims: () => ({ sub: id }) } : undefined;
  },
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
      defaultResource: (ctx, client) => (client?.clientId === loginClient ? undefined : resource),
      getResourceServerInfo: (ctx, indicator) => {
        if (indicator.replace(/\/$/, '') !== resource.replace(/\/$/, '')) throw new Provider.errors.InvalidTarget();
        return { scope, audience: resource, accessTokenTTL: ttl, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } } };
      },
    },
  },
});
// The login interaction: a form (GET), the password checked (POST), consent granted for the one
// first-party client without asking.
const page = (uid, message) => `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Log in</title></head>
<body><main><h1>Log in to approve</h1>${message ? `<p id="error" role="alert">${message}</p>` : ''}
<form method="post" action="/interaction/${uid}/login"><label for="user">User name</label>
<input id="user" name="user" autocomplete="username" required><label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Log in</button></form></main></body></html>`;

async function formBody(req) {
  let size = 0;
  const chunks = [];
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 4096) throw new Error('body too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

provider.use(async (ctx, next) => {
  const match = /^\/interaction\/([A-Za-z0-9_-]{1,64})(\/login)?$/.exec(ctx.path);
  if (!match || !loginClient) return next();
  // No form-action: the login's redirects end on the approval page, another origin.
  const headers = { 'Content-Security-Policy': "default-src 'none'; frame-ancestors 'none'", 'Cache-Control': 'no-store' };
  ctx.set(headers);
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  // The person client signs in on oidc-provider's own (development) login page, not this form.
  if (details.params.client_id !== loginClient) return next();
  const [, uid, login] = match;
  if (details.uid !== uid) ctx.throw(400);
  if (details.prompt.name === 'consent') {
    if (details.params.client_id !== loginClient) ctx.throw(403);
    const grant = new provider.Grant({ accountId: details.session.accountId, clientId: loginClient });
    grant.addOIDCScope(String(details.params.scope));
    const result = { consent: { grantId: await grant.save() } };
    ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: true }));
    return undefined;
  }
  if (!login) {
    ctx.type = 'html';
    ctx.body = page(uid, '');
    return undefined;
  }
  if (ctx.method !== 'POST') ctx.throw(405);
  const form = await formBody(ctx.req);
  const user = form.get('user') || '';
  const known = Object.hasOwn(approvers, user);
  const ok = passwordMatches(form.get('password') || '', known ? approvers[user].password_hash : decoyHash) && known;
  if (!ok) {
    say('login_refused', { user: known ? user : null });
    ctx.type = 'html';
    ctx.status = 401;
    ctx.body = page(uid, 'Wrong user name or password.');
    return undefined;
  }
  say('login', { user });
  const result = { login: { accountId: user } };
  ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: false }));
  return undefined;
});

// Behind no proxy, on loopback: plain http is this example's choice (a real deployment uses https).
provider.proxy = false;

provider.on('client_credentials.issued', (token) => say('token_issued', { client_id: token.clientId, aud: token.aud }));
provider.on('authorization_code.consumed', (code) => say('code_consumed', { client_id: code.clientId }));
for (const event of ['access_token.saved', 'access_token.issued']) {
  provider.on(event, (token) => say('access_token_issued', { client_id: token.clientId, sub: token.accountId }));
}
provider.on('grant.success', (ctx) => say('grant_success', { grant_type: ctx.oidc.params?.grant_type ?? null }));
provider.on('grant.revoked', (ctx, grantId) => say('grant_revoked', { client_id: ctx.oidc?.client?.clientId ?? null }));
provider.on('grant.error', (ctx, error) => say('token_refused', { client_id: ctx.oidc?.client?.clientId ?? null, error: error.error }));

provider.listen(Number(env('AUTH_PORT')), '127.0.0.1', () => say('listening', { issuer }));
