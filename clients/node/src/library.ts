// shardq's Redis Functions library: the function each operation calls (see
// shardq/store/loader.py).  Its name, functions and code are generated from the repository's
// lua/ (library.generated.ts, committed).
import { FUNCTIONS, FunctionSpec, LIBRARY_CODE, LIBRARY_NAME, WIRE } from './library.generated';

export { FUNCTIONS, FunctionSpec, LIBRARY_CODE, LIBRARY_NAME, WIRE };

/** The function name of an operation (`<library>_<op with '-' as '_'>`). */
export function functionName(op: string): string {
  const spec = Object.hasOwn(FUNCTIONS, op) ? FUNCTIONS[op] : undefined;
  if (spec === undefined) throw new Error(`${LIBRARY_NAME} has no function for ${op}`);
  return spec.name;
}

/** Whether an error reply says the node lacks the library (a new node, FUNCTION FLUSH). */
export function isCodeMissing(err: unknown): boolean {
  return err instanceof Error && /Function not found|NOSCRIPT/.test(err.message);
}
