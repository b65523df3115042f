// Number formatting shared by the status bar, the lanes tree and the README preview.

import { CostEntry } from "./lanesModel";

/** `$1.42`; sub-cent costs read `<$0.01` rather than a misleading `$0.00`; budgets drop `.00`. */
export function formatUsd(value: number, options: { whole?: boolean } = {}): string {
  if (value > 0 && value < 0.01) return "<$0.01";
  if (options.whole && Number.isInteger(value)) return `$${value}`;
  if (value >= 1000) return `$${Math.round(value).toLocaleString("en-US")}`;
  return `$${value.toFixed(2)}`;
}

/** `950`, `12.3k`, `4.1M`. */
export function formatTokens(value: number): string {
  if (value < 1000) return String(Math.round(value));
  if (value < 1_000_000) return `${trim(value / 1000)}k`;
  return `${trim(value / 1_000_000)}M`;
}

function trim(x: number): string {
  return x >= 100 ? String(Math.round(x)) : x.toFixed(1).replace(/\.0$/, "");
}

/**
 * A run's cost as one phrase: measured `$1.42`, estimated `~$0.40 est.`, with unpriced tokens
 * said apart (never counted as $0), and the budget when one is set: `$1.42 / $10`.
 * Empty when nothing has been spent yet.
 */
export function costPhrase(cost: CostEntry | undefined): string {
  if (!cost || (cost.tokens === 0 && cost.costUsd === undefined)) {
    return cost?.budgetUsd !== undefined ? `$0.00 / ${formatUsd(cost.budgetUsd, { whole: true })}` : "";
  }
  const parts: string[] = [];
  if (cost.costUsd !== undefined) {
    let money = formatUsd(cost.costUsd);
    if (cost.estimatedTokens > 0) money = `~${money} est.`;
    if (cost.budgetUsd !== undefined) money += ` / ${formatUsd(cost.budgetUsd, { whole: true })}`;
    parts.push(money);
    if (cost.unpricedTokens > 0) parts.push(`${formatTokens(cost.unpricedTokens)} tok unpriced`);
  } else {
    parts.push(`${formatTokens(cost.tokens)} tok unpriced`);
    if (cost.budgetUsd !== undefined) parts.push(`budget ${formatUsd(cost.budgetUsd, { whole: true })}`);
  }
  return parts.join(" + ");
}

/** A lane's own cost: `$0.42`, or `~$0.42` when any of it is estimated. */
export function laneCost(costUsd: number | undefined, estimated: boolean): string {
  if (costUsd === undefined) return "";
  return `${estimated ? "~" : ""}${formatUsd(costUsd)}`;
}
