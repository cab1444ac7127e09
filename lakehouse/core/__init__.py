"""The ground floor: settings, the Spark session, errors, the Kafka admin client, locks and the
local platform (a real Kafka broker started from Maven jars). Imports nothing of the project's
other packages; everything else may import it."""
