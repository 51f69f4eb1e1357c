package telemetry.sink;

/**
 * A delay that doubles with each failure, from a first delay up to a most: the wait of a failed
 * login ({@link LoginGate}) and of a statement whose user exhausted the server's limits ({@link
 * StatementBackoff}).
 */
final class Backoff {

  private Backoff() {}

  /**
   * The delay after {@code failures} (0 for none): {@code firstMs} times 2^(failures - 1), at most
   * {@code mostMs}.
   */
  static long doubled(int failures, long firstMs, long mostMs) {
    if (failures <= 0) {
      return 0;
    }
    int doublings = Math.min(failures - 1, 30);
    return Math.min(mostMs, firstMs << doublings);
  }
}
