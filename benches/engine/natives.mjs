// V8 intrinsics for diagnosis; loaded only by runs with --allow-natives-syntax.
export function engine() {
  return { wasmTrapHandler: %IsWasmTrapHandlerEnabled() };
}
