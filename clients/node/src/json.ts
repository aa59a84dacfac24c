// JSON text byte-identical to orjson.dumps (what the Python client stores) for the values a
// JS caller can pass: compact separators, non-ASCII kept as UTF-8, strings escaped as orjson
// does (which JSON.stringify matches for well-formed strings), floats formatted as orjson
// formats them, integers within 64 bits.  What orjson refuses is refused here with a reason:
// NaN/Infinity (orjson would write null: the Python client refuses them), integers beyond
// -2**63..2**64-1, lone surrogates, more than 254 levels of nesting, and values JSON has no
// form for (undefined, functions, symbols, Dates, Maps, class instances...).
//
// A JS number does not say whether it was an int or a float: a safe integer (|n| <= 2**53 - 1,
// -0 included) is written as an integer, as Python writes an int (Python's json.loads of "1.0"
// gives a float that orjson writes "1.0"; here 1.0 === 1 is written "1"); any other number is
// written as orjson writes a float (1e16 -> "1e+16").  Pass a BigInt for an exact integer
// beyond 2**53 (written as an integer when within -2**63..2**64-1, refused beyond, as orjson
// refuses such a Python int).

export class JsonEncodeError extends Error {}

const MAX_DEPTH = 254; // orjson: "Recursion limit reached" past 254 nested containers
const INT_MIN = -(2n ** 63n);
const INT_MAX = 2n ** 64n - 1n;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** A finite float as orjson writes it: shortest round-trip digits; fixed notation for
 *  decimal exponents -5..15 (with '.0' when integral), else d.ddde+X / d.ddde-X. */
export function formatFloat(n: number): string {
  if (n === 0) return Object.is(n, -0) ? '-0.0' : '0.0';
  const sign = n < 0 ? '-' : '';
  const [mant, expText] = Math.abs(n).toExponential().split('e');
  const exp = parseInt(expText, 10);
  const digits = mant.replace('.', '');
  if (exp >= 16 || exp < -5) {
    const frac = digits.length > 1 ? '.' + digits.slice(1) : '';
    return `${sign}${digits[0]}${frac}e${exp < 0 ? '-' : '+'}${Math.abs(exp)}`;
  }
  if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  if (digits.length <= exp + 1) return `${sign}${digits}${'0'.repeat(exp + 1 - digits.length)}.0`;
  return `${sign}${digits.slice(0, exp + 1)}.${digits.slice(exp + 1)}`;
}

function number(n: number): string {
  if (!Number.isFinite(n)) throw new JsonEncodeError(`${n} is not a finite number`);
  if (Number.isSafeInteger(n)) return String(n === 0 ? 0 : n);
  return formatFloat(n);
}

function string(s: string): string {
  if (LONE_SURROGATE.test(s)) throw new JsonEncodeError('str is not valid UTF-8: surrogates not allowed');
  return JSON.stringify(s);
}

function isPlainObject(v: object): boolean {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

function encode(v: unknown, depth: number): string {
  switch (typeof v) {
    case 'string':
      return string(v);
    case 'number':
      return number(v);
    case 'boolean':
      return v ? 'true' : 'false';
    case 'bigint':
      if (v < INT_MIN || v > INT_MAX) throw new JsonEncodeError('Integer exceeds 64-bit range');
      return v.toString();
    case 'object': {
      if (v === null) return 'null';
      if (depth >= MAX_DEPTH) throw new JsonEncodeError('Recursion limit reached');
      if (Array.isArray(v)) {
        const parts: string[] = [];
        for (let i = 0; i < v.length; i++) parts.push(encode(v[i], depth + 1));
        return '[' + parts.join(',') + ']';
      }
      if (!isPlainObject(v)) {
        const what = (v as object).constructor?.name ?? 'object';
        throw new JsonEncodeError(`Type is not JSON serializable: ${what}`);
      }
      const parts: string[] = [];
      for (const key of Object.keys(v)) {
        const value = (v as Record<string, unknown>)[key];
        parts.push(string(key) + ':' + encode(value, depth + 1));
      }
      return '{' + parts.join(',') + '}';
    }
    default:
      throw new JsonEncodeError(`Type is not JSON serializable: ${typeof v}`);
  }
}

/** orjson.dumps(value) as text; JsonEncodeError for what orjson (or the Python client) refuses. */
export function dumps(value: unknown): string {
  return encode(value, 0);
}
