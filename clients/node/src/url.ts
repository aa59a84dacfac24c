// Redis URLs with their credentials kept out of every message (port of shardq/config.py
// split_credentials and redact_url).  A password may hold '#', '/', '?', '@', ':' or '['
// unescaped: WHATWG URL parsing would read them as a fragment, a path, a query, a port or an
// IPv6 host, fail, and a message quoting the URL would show the password.  So the credentials
// are cut out by hand first, between '://' and the LAST '@', before anything parses the rest.

const QUERY_SECRET = /([?&;](?:password|pass|passwd|pwd)=)[^&;#]*/gi;
const SCHEME = /^[A-Za-z][A-Za-z0-9+.\-]*:\/\//;

/** `url` as [scheme with '://', the credentials or null, the rest]: split after a leading
 *  scheme (absent: everything up to the last '@' is credentials) and at the LAST '@'. */
export function splitCredentials(url: string): [string, string | null, string] {
  const scheme = SCHEME.exec(url);
  const head = scheme ? scheme[0] : '';
  const rest = url.slice(head.length);
  const at = rest.lastIndexOf('@');
  if (at < 0) return [head, null, rest];
  return [head, rest.slice(0, at), rest.slice(at + 1)];
}

/** The URL with any password replaced by `***` (for messages and logs): what lies between
 *  '://' and the last '@' (the username stays when it is `user:password`), and a `password=`
 *  query argument. */
export function redactUrl(url: unknown): string {
  if (typeof url !== 'string') return '<not a string>';
  const [head, userinfo, rest] = splitCredentials(url);
  const shownRest = rest.replace(QUERY_SECRET, '$1***');
  if (userinfo === null) return head + shownRest;
  const colon = userinfo.indexOf(':');
  // Without a ':' the credentials may be a bare password (some clients read them so).
  return colon >= 0 ? `${head}${userinfo.slice(0, colon)}:***@${shownRest}` : `${head}***@${shownRest}`;
}

/** Whether the URL's query names a password (`?password=...`), which shardq does not read. */
export function hasQuerySecret(url: string): boolean {
  QUERY_SECRET.lastIndex = 0;
  const found = QUERY_SECRET.test(splitCredentials(url)[2]);
  QUERY_SECRET.lastIndex = 0;
  return found;
}

/** Percent-decoding as Python's unquote does it: a malformed escape stays as written. */
export function unquote(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s.replace(/(%[0-9A-Fa-f]{2})+/g, (run) => {
      try {
        return decodeURIComponent(run);
      } catch {
        return run;
      }
    });
  }
}
