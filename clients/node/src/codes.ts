// Script return codes: the one place they become typed errors.  The codes, their errors and
// their messages are shardq/store/codes.py's (constants.generated.ts); here, how a reply's
// detail is read and the message formatted, as codes.py does it.
import { PERMITTED_ROLES, REFUSALS, RefusalError, RefusalShape } from './constants.generated';
import * as generatedErrors from './errors.generated';
import { LayoutMovedError, ScriptError, ShardqError, repr } from './errors';

/** What a shape reads from a reply's detail (codes.py Shaped). */
interface Shaped {
  fields: Record<string, string | number>;
  /** Which of the refusal's messages applies. */
  message?: number;
  /** More arguments of the error's constructor. */
  args?: unknown[];
}

const isDigits = (s: string): boolean => /^[0-9]+$/.test(s);

/** codes.py SHAPES: the codes whose detail is read before formatting. */
const SHAPES: Record<RefusalShape, (d: string[]) => Shaped> = {
  fenced: (d) => ({ fields: { holder: d[1] || 'free' } }),
  not_permitted: (d) => ({ fields: { roles: PERMITTED_ROLES[d[0]] ?? d[0] }, message: d[2] === '?' ? 0 : 1 }),
  layout_moved: (d) => {
    const at = d[0].indexOf(':');
    const generation = at < 0 ? d[0] : d[0].slice(0, at);
    const partitions = at < 0 ? '' : d[0].slice(at + 1);
    const gen = isDigits(generation) ? parseInt(generation, 10) : 0;
    const count = isDigits(partitions) ? parseInt(partitions, 10) : 0;
    return { fields: { generation: gen, partitions: count }, args: [gen, count] };
  },
};

type ErrorClass = new (message: string, ...args: any[]) => ShardqError;

// Every error a code raises (a class with fields of its own is errors.ts's).
const CLASSES: Record<RefusalError, ErrorClass> = { ...generatedErrors, LayoutMovedError };

const FIELD = /\{\{|\}\}|\{([0-9]+|[a-z_]+)(!r)?\}/g;

/** A message template filled as Python's str.format fills it ({0}, {1!r}, {name}; the only
 *  syntax the generator lets through). */
function formatMessage(template: string, detail: string[], fields: Record<string, unknown>): string {
  return template.replace(FIELD, (all: string, name?: string, quoted?: string) => {
    if (name === undefined) return all[0];
    const value = isDigits(name) ? detail[Number(name)] : fields[name];
    return quoted ? repr(value) : String(value);
  });
}

function text(value: unknown): string {
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  if (value === null || value === undefined) return 'None';
  return String(value);
}

/** The typed error for a script's negative return code and its detail fields. */
export function errorFor(code: number, detail: unknown[]): ShardqError {
  const refusal = Object.hasOwn(REFUSALS, code) ? REFUSALS[code] : undefined;
  if (refusal === undefined) {
    return new ScriptError(`script returned unknown code ${code} ${JSON.stringify(detail)}: upgrade shardq`);
  }
  const texts = detail.map(text);
  while (texts.length < 4) texts.push('?'); // a short reply still makes an error
  const shaped: Shaped = refusal.shape === null ? { fields: {} } : SHAPES[refusal.shape](texts);
  const message = formatMessage(refusal.messages[shaped.message ?? 0], texts, shaped.fields);
  return new CLASSES[refusal.error](message, ...(shaped.args ?? []));
}

/** Whether `reply` is the script's `{code, ...}` answer. */
export function isCode(reply: unknown, code: number): boolean {
  return Array.isArray(reply) && reply.length > 0 && reply[0] === code;
}

/** Throw the typed error for a negative script code (or a raised reply); else the reply as an
 *  array. */
export function check(reply: unknown): unknown[] {
  if (reply instanceof Error) throw reply;
  if (Array.isArray(reply)) {
    if (reply.length > 0 && typeof reply[0] === 'number' && Number.isInteger(reply[0]) && reply[0] < 0) {
      throw errorFor(reply[0], reply.slice(1));
    }
    return reply;
  }
  return [reply];
}
