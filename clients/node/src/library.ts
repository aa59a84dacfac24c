// shardq's Redis Functions library: the function each operation calls (see
// shardq/store/loader.py).  The code is generated from the Python package
// (scripts/export-library.sh -> library.generated.ts).
import { LIBRARY_CODE, LIBRARY_NAME, WIRE } from './library.generated';

export { LIBRARY_CODE, LIBRARY_NAME, WIRE };

/** KEYS count of each producer-facing function (the file name's, lua/<op>-<keys>.lua), and
 *  whether it is flagged no-writes (called with FCALL_RO). */
export const FUNCTIONS: Record<string, { keys: number; maxArgv: number; readOnly: boolean }> = {
  'queue-create': { keys: 1, maxArgv: 4, readOnly: false },
  'control-init': { keys: 2, maxArgv: 0, readOnly: false },
  lanes: { keys: 3, maxArgv: 1, readOnly: false },
  enqueue: { keys: 8, maxArgv: 11, readOnly: false },
  'enqueue-batch': { keys: 7, maxArgv: 1004, readOnly: false },
  get: { keys: 6, maxArgv: 1, readOnly: true },
  cancel: { keys: 7, maxArgv: 3, readOnly: false },
  reschedule: { keys: 4, maxArgv: 7, readOnly: false },
};

/** The function name of an operation: `<library>_<op with '-' as '_'>`. */
export function functionName(op: string): string {
  return `${LIBRARY_NAME}_${op.replace(/-/g, '_')}`;
}

/** Whether an error reply says the node lacks the library (a new node, FUNCTION FLUSH). */
export function isCodeMissing(err: unknown): boolean {
  return err instanceof Error && /Function not found|NOSCRIPT/.test(err.message);
}
