"""How each operand state's objects are built: the render context every builder shares
(`context`), plain object helpers (`objects`), and one builder per state, for the operands
that run kubegpu (`native`) and for those that run upstream's images (`upstream`). Each
builder is registered on its `OperandState` in `kubegpu.operator.states`."""
