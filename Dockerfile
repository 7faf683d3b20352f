# The Airflow image of the docker-compose stack: Airflow 3.3 with this provider, PySpark and Java 17.
# The same image runs the Spark master and worker (pyspark's pip distribution ships Spark), so
# drivers and executors have the same Python and the same table core.
# Build context: the repository root. Installs are pinned by constraints.txt, as `make` does.
FROM python:3.11.7-slim-bookworm

# Debian names the JDK folder by architecture (java-17-openjdk-amd64, -arm64): /usr/lib/jvm/java-17
# links to it, so JAVA_HOME is right on both (Apple silicon builds arm64).
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless curl procps tini \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17 \
    && /usr/lib/jvm/java-17/bin/java -version

ENV AIRFLOW_HOME=/opt/airflow \
    PYTHONUNBUFFERED=1 \
    PYSPARK_PYTHON=python3 \
    JAVA_HOME=/usr/lib/jvm/java-17

WORKDIR /opt/lake-provider
COPY pyproject.toml constraints.txt ./
COPY airflow_lake_provider ./airflow_lake_provider
# psycopg: the PostgreSQL driver of the metadata DB. pyspark is installed again without its
# dependencies afterwards: pyspark-client (pulled in by the Spark provider) writes into the same
# folder (see the Makefile).
RUN pip install --no-cache-dir -c constraints.txt uv \
    && uv pip install --system --no-cache -c constraints.txt '.[spark,s3]' "psycopg[binary]" \
    && uv pip uninstall --system pyspark \
    && uv pip install --system --no-cache --no-deps -c constraints.txt pyspark \
    && python -c "import pyspark, airflow_lake_provider; print('pyspark', pyspark.__version__)"

RUN useradd --create-home --uid 50000 --home-dir /home/airflow airflow \
    && mkdir -p /opt/airflow/dags /opt/airflow/logs /opt/airflow/auth /tmp/lake-examples \
    && chown -R airflow /opt/airflow /tmp/lake-examples
USER airflow
WORKDIR /opt/airflow
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["airflow", "version"]
